//! `-K/--config FILE`: curl's config files, expanded into the command line
//! before it is parsed.
//!
//! A line holds one option: `--flag value`, `flag = value`, `flag: value`,
//! `flag value` or `flag` alone (the leading dashes are optional for long
//! names); a value in double quotes may hold spaces and the escapes `\\`,
//! `\"`, `\t`, `\n`, `\r`, `\v`; `#` starts a comment line; `url = …` adds
//! a URL. Whether an option takes a value is the command's own knowledge.

use std::ffi::OsString;

/// The command line with every `-K FILE` / `--config FILE` (and `-KFILE`,
/// `--config=FILE`) followed by the file's options, files inside files too
/// (up to a depth of 10).
///
/// `takes_value(long_name)`: whether the long option takes a value (`None`:
/// no such option).
///
/// # Errors
/// A file that cannot be read, a nesting too deep, an unknown option or a
/// missing value (the file and line named).
pub fn expand(
    argv: Vec<OsString>,
    takes_value: &dyn Fn(&str) -> Option<bool>,
    short_to_long: &dyn Fn(char) -> Option<String>,
) -> Result<Vec<OsString>, String> {
    expand_at(argv, takes_value, short_to_long, 0)
}

fn expand_at(
    argv: Vec<OsString>,
    takes_value: &dyn Fn(&str) -> Option<bool>,
    short_to_long: &dyn Fn(char) -> Option<String>,
    depth: usize,
) -> Result<Vec<OsString>, String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy().into_owned();
        let file = if text == "-K" || text == "--config" {
            out.push(arg);
            let Some(file) = args.next() else { return Ok(out) };
            out.push(file.clone());
            Some(file.to_string_lossy().into_owned())
        } else if let Some(f) = text.strip_prefix("--config=") {
            out.push(arg.clone());
            Some(f.to_owned())
        } else if let Some(f) = text.strip_prefix("-K").filter(|f| !f.is_empty() && !text.starts_with("--")) {
            out.push(arg.clone());
            Some(f.to_owned())
        } else {
            out.push(arg);
            None
        };
        if let Some(file) = file {
            if depth >= 10 {
                return Err(format!("-K {file}: config files nested more than 10 deep"));
            }
            let content = if file == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| format!("cannot read the config from stdin: {e}"))?;
                s
            } else {
                std::fs::read_to_string(&file)
                    .map_err(|e| format!("cannot read the config file {file}: {e}"))?
            };
            let from_file =
                parse(&content, takes_value, short_to_long).map_err(|e| format!("{file}: {e}"))?;
            let from_file = from_file.into_iter().map(OsString::from).collect();
            out.extend(expand_at(from_file, takes_value, short_to_long, depth + 1)?);
        }
    }
    Ok(out)
}

/// A config file's text as command-line arguments.
///
/// ```
/// use switchyard_cli::config::parse;
/// let takes = |name: &str| match name { "header" | "url" | "output" => Some(true), "silent" => Some(false), _ => None };
/// let short = |c: char| (c == 's').then(|| "silent".to_owned());
/// let args = parse("# a comment\nsilent\nheader = \"X-A: 1 2\"\n--output: out.txt\nurl http://a/\n-s\n", &takes, &short).unwrap();
/// assert_eq!(args, ["--silent", "--header", "X-A: 1 2", "--output", "out.txt", "--url", "http://a/", "-s"]);
/// ```
///
/// # Errors
/// An unknown option, a value missing, or an unterminated quote, with its
/// line number.
pub fn parse(
    text: &str,
    takes_value: &dyn Fn(&str) -> Option<bool>,
    short_to_long: &dyn Fn(char) -> Option<String>,
) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}", n + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let end = line.find(|c: char| c.is_whitespace() || c == '=' || c == ':').unwrap_or(line.len());
        let (option, rest) = line.split_at(end);
        let rest = rest.trim_start_matches(|c: char| c.is_whitespace());
        let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest).trim_start();
        let (long, dashed) = if let Some(long) = option.strip_prefix("--") {
            (long.to_owned(), format!("--{long}"))
        } else if let Some(short) = option.strip_prefix('-') {
            let mut chars = short.chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return Err(at(format!("{option:?}: one short option per line")));
            };
            let long = short_to_long(c).ok_or_else(|| at(format!("unknown option {option}")))?;
            (long, option.to_owned())
        } else {
            (option.to_owned(), format!("--{option}"))
        };
        let takes = takes_value(&long).ok_or_else(|| at(format!("unknown option {option:?}")))?;
        args.push(dashed);
        if takes {
            if rest.is_empty() {
                return Err(at(format!("{option} needs a value")));
            }
            args.push(value(rest).map_err(at)?);
        }
    }
    Ok(args)
}

/// A value: quoted (escapes read, the rest of the line after the closing
/// quote ignored) or up to the first white space.
fn value(rest: &str) -> Result<String, String> {
    let Some(quoted) = rest.strip_prefix('"') else {
        return Ok(rest.split_whitespace().next().unwrap_or_default().to_owned());
    };
    let mut out = String::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Ok(out),
            '\\' => match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('v') => out.push('\u{b}'),
                Some(other) => out.push(other),
                None => break,
            },
            other => out.push(other),
        }
    }
    Err("unterminated quote".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn takes(name: &str) -> Option<bool> {
        match name {
            "header" | "url" | "data" | "config" => Some(true),
            "silent" | "location" => Some(false),
            _ => None,
        }
    }
    fn short(c: char) -> Option<String> {
        match c {
            'L' => Some("location".into()),
            'H' => Some("header".into()),
            _ => None,
        }
    }

    #[test]
    fn quoting_escapes_and_errors() {
        let args = parse("data = \"a\\\"b\\tc\" trailing\n-L\n-H: \"X: y\"\n", &takes, &short).unwrap();
        assert_eq!(args, ["--data", "a\"b\tc", "-L", "-H", "X: y"]);
        assert!(parse("nope\n", &takes, &short).unwrap_err().contains("line 1"));
        assert!(parse("\n\nheader\n", &takes, &short).unwrap_err().contains("line 3: header needs a value"));
        assert!(parse("header = \"open\n", &takes, &short).unwrap_err().contains("unterminated"));
        assert!(parse("-LH\n", &takes, &short).is_err());
    }

    #[test]
    fn files_expand_in_place_and_nesting_is_bounded() {
        let dir = std::env::temp_dir().join(format!("switchyard-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let inner = dir.join("inner");
        let outer = dir.join("outer");
        std::fs::write(&inner, "silent\n").unwrap();
        std::fs::write(&outer, format!("url = http://a/\nconfig = {}\n", inner.display())).unwrap();
        let argv: Vec<OsString> =
            ["switchyard", "get", "-K", outer.to_str().unwrap(), "-L"].map(OsString::from).to_vec();
        let out: Vec<String> =
            expand(argv, &takes, &short).unwrap().into_iter().map(|s| s.into_string().unwrap()).collect();
        let (o, i) = (outer.display().to_string(), inner.display().to_string());
        assert_eq!(
            out,
            ["switchyard", "get", "-K", &o, "--url", "http://a/", "--config", &i, "--silent", "-L"]
        );
        let selfish = dir.join("selfish");
        std::fs::write(&selfish, format!("config = {}\n", selfish.display())).unwrap();
        let argv = ["x", "-K", selfish.to_str().unwrap()].map(OsString::from).to_vec();
        assert!(expand(argv, &takes, &short).unwrap_err().contains("nested"));
        let argv = ["x", "-K", "/no/such/file"].map(OsString::from).to_vec();
        assert!(expand(argv, &takes, &short).unwrap_err().contains("/no/such/file"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
