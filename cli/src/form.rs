//! Bodies built from curl's form flags: `-F` (multipart/form-data, RFC 7578)
//! and `--data-urlencode`.

use crate::exit::Failed;

/// Characters `--data-urlencode` leaves as they are: RFC 3986's unreserved.
const ESCAPED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `s` percent-encoded as curl encodes (`%20` for a space).
#[must_use]
pub fn urlencode(s: &[u8]) -> String {
    percent_encoding::percent_encode(s, ESCAPED).to_string()
}

/// `s` encoded as `--data-urlencode` sends it: [`urlencode`], a space as `+`.
#[must_use]
pub fn form_encode(s: &[u8]) -> String {
    urlencode(s).replace("%20", "+")
}

/// One `--data-urlencode` value, curl's forms: `content` and `=content`
/// (the content encoded), `name=content` (`name=` kept), `@file` and
/// `name@file` (the file's bytes encoded). `read`: a file's bytes.
///
/// ```
/// use switchyard_cli::form::urlencode_arg;
/// let none = |_: &str| Vec::new();
/// assert_eq!(urlencode_arg("a b&c", none), b"a+b%26c");
/// assert_eq!(urlencode_arg("q=a b", none), b"q=a+b");
/// assert_eq!(urlencode_arg("=x=y", none), b"x%3Dy");
/// ```
pub fn urlencode_arg(d: &str, read: impl Fn(&str) -> Vec<u8>) -> Vec<u8> {
    let eq = d.find('=');
    let at = d.find('@');
    match (eq, at) {
        (Some(0), _) => form_encode(&d.as_bytes()[1..]).into_bytes(),
        (Some(i), a) if a.is_none_or(|a| a > i) => {
            format!("{}={}", &d[..i], form_encode(&d.as_bytes()[i + 1..])).into_bytes()
        }
        (_, Some(0)) => form_encode(&read(&d[1..])).into_bytes(),
        (_, Some(i)) => format!("{}={}", &d[..i], form_encode(&read(&d[i + 1..]))).into_bytes(),
        _ => form_encode(d.as_bytes()).into_bytes(),
    }
}

/// The multipart body of every `-F` (`forms`) and `--form-string`
/// (`strings`) part, with `boundary`.
///
/// `-F name=value`; `name=@file` uploads the file (`filename` its base name,
/// `Content-Type` guessed from its extension); `name=<file` sends the file's
/// text as a plain value; `;type=…` and `;filename=…` after either set those.
///
/// # Errors
/// A part without `=` (exit 2), a file that cannot be read (exit 26).
pub fn multipart(forms: &[String], strings: &[String], boundary: &str) -> Result<Vec<u8>, Failed> {
    let mut body = Vec::new();
    let mut part = |name: &str, filename: Option<&str>, content_type: Option<&str>, content: &[u8]| {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{}\"", quote(name));
        if let Some(f) = filename {
            disposition.push_str(&format!("; filename=\"{}\"", quote(f)));
        }
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"\r\n");
        if let Some(t) = content_type {
            body.extend_from_slice(format!("Content-Type: {t}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    };
    for f in forms {
        let (name, rest) =
            f.split_once('=').ok_or_else(|| Failed::config(format!("-F {f:?}: expected NAME=CONTENT")))?;
        if let Some(spec) = rest.strip_prefix('@') {
            let (file, options) = split_options(spec);
            let content = crate::request::read_source(file, "-F")?;
            let base = std::path::Path::new(file).file_name().map(|n| n.to_string_lossy().into_owned());
            let filename = options.filename.or(if file == "-" { None } else { base });
            let content_type = options.content_type.unwrap_or_else(|| guess_type(file).to_owned());
            part(name, Some(filename.as_deref().unwrap_or("-")), Some(&content_type), &content);
        } else if let Some(spec) = rest.strip_prefix('<') {
            let (file, options) = split_options(spec);
            let content = crate::request::read_source(file, "-F")?;
            part(name, options.filename.as_deref(), options.content_type.as_deref(), &content);
        } else {
            let (value, options) = split_options(rest);
            part(name, options.filename.as_deref(), options.content_type.as_deref(), value.as_bytes());
        }
    }
    for s in strings {
        let (name, value) = s
            .split_once('=')
            .ok_or_else(|| Failed::config(format!("--form-string {s:?}: expected NAME=STRING")))?;
        part(name, None, None, value.as_bytes());
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Ok(body)
}

#[derive(Default)]
struct PartOptions {
    content_type: Option<String>,
    filename: Option<String>,
}

/// `value;type=x;filename=y` split into the value and its options (an
/// unknown `;…` stays part of the value).
fn split_options(spec: &str) -> (&str, PartOptions) {
    let mut options = PartOptions::default();
    let mut end = spec.len();
    let mut rest = spec;
    let mut cut = None;
    while let Some(i) = rest.rfind(';') {
        let option = &rest[i + 1..];
        if let Some(t) = option.strip_prefix("type=") {
            options.content_type = Some(t.to_owned());
        } else if let Some(f) = option.strip_prefix("filename=") {
            options.filename = Some(f.trim_matches('"').to_owned());
        } else {
            break;
        }
        cut = Some(i);
        rest = &rest[..i];
    }
    if let Some(i) = cut {
        end = i;
    }
    (&spec[..end], options)
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// curl's guesses from a file's extension; else `application/octet-stream`.
fn guess_type(file: &str) -> &'static str {
    let ext = file.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "gif" => "image/gif",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "txt" => "text/plain",
        "htm" | "html" => "text/html",
        "pdf" => "application/pdf",
        "xml" => "application/xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_as_curl_writes_them() {
        let dir = std::env::temp_dir().join(format!("switchyard-form-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("note.txt");
        std::fs::write(&file, "line\n").unwrap();
        let forms = [
            "a=1".to_owned(),
            format!("up=@{}", file.display()),
            format!("text=<{};type=text/x-mine", file.display()),
            format!("named=@{};filename=other.bin;type=application/x-a", file.display()),
        ];
        let body = String::from_utf8(multipart(&forms, &["s=@literal".to_owned()], "B").unwrap()).unwrap();
        assert_eq!(
            body,
            "--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n\
             --B\r\nContent-Disposition: form-data; name=\"up\"; filename=\"note.txt\"\r\nContent-Type: text/plain\r\n\r\nline\n\r\n\
             --B\r\nContent-Disposition: form-data; name=\"text\"\r\nContent-Type: text/x-mine\r\n\r\nline\n\r\n\
             --B\r\nContent-Disposition: form-data; name=\"named\"; filename=\"other.bin\"\r\nContent-Type: application/x-a\r\n\r\nline\n\r\n\
             --B\r\nContent-Disposition: form-data; name=\"s\"\r\n\r\n@literal\r\n--B--\r\n"
        );
        assert_eq!(multipart(&["novalue".into()], &[], "B").unwrap_err().code, crate::exit::CONFIG);
        assert_eq!(multipart(&["f=@/no/such".into()], &[], "B").unwrap_err().code, crate::exit::READ);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn urlencode_forms() {
        let read = |_: &str| b"a b\n".to_vec();
        assert_eq!(urlencode_arg("@f", read), b"a+b%0A");
        assert_eq!(urlencode_arg("n@f", read), b"n=a+b%0A");
        assert_eq!(urlencode_arg("e=m@il", read), b"e=m%40il");
        assert_eq!(urlencode_arg("~._-", read), b"~._-");
    }
}
