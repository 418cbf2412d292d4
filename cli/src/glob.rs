//! curl's URL globbing: `{a,b,c}` alternatives and `[1-10]`, `[01-10]`,
//! `[a-z]`, `[1-10:2]` ranges, expanded left to right (the last one varies
//! fastest); `#N` in an `-o` name is the Nth pattern's value. `\{`, `\[`
//! are literal; `-g` turns it off.

/// The most URLs one pattern may expand to.
pub const MAX_URLS: usize = 100_000;

/// One URL of an expansion and the value each pattern took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    /// The URL.
    pub url: String,
    /// The patterns' values, in order (`#1` is the first).
    pub values: Vec<String>,
}

enum Piece {
    Text(String),
    Set(Vec<String>),
}

/// Every URL `pattern` names.
///
/// ```
/// use switchyard_cli::glob::expand;
/// let urls: Vec<_> = expand("http://a/{x,y}/[1-2]").unwrap().into_iter().map(|e| e.url).collect();
/// assert_eq!(urls, ["http://a/x/1", "http://a/x/2", "http://a/y/1", "http://a/y/2"]);
/// ```
///
/// # Errors
/// An unclosed or malformed pattern, or more than [`MAX_URLS`] URLs (curl's
/// exit code 3, "bad URL").
pub fn expand(pattern: &str) -> Result<Vec<Expanded>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = pattern.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if matches!(chars.peek(), Some((_, '{' | '}' | '[' | ']'))) => {
                if let Some((_, next)) = chars.next() {
                    text.push(next);
                }
            }
            '{' => {
                let close =
                    pattern[i..].find('}').ok_or_else(|| format!("unmatched '{{' at position {}", i + 1))?;
                let inner = &pattern[i + 1..i + close];
                pieces.push(Piece::Text(std::mem::take(&mut text)));
                pieces.push(Piece::Set(inner.split(',').map(str::to_owned).collect()));
                while chars.peek().is_some_and(|(j, _)| *j <= i + close) {
                    chars.next();
                }
            }
            '[' => {
                let close =
                    pattern[i..].find(']').ok_or_else(|| format!("unmatched '[' at position {}", i + 1))?;
                let inner = &pattern[i + 1..i + close];
                // An IPv6 literal ([::1]) is not a range.
                if inner.contains(':') && !inner.contains('-') || inner.parse::<std::net::Ipv6Addr>().is_ok()
                {
                    text.push_str(&pattern[i..=i + close]);
                } else {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                    pieces
                        .push(Piece::Set(range(inner).map_err(|why| format!("bad range [{inner}]: {why}"))?));
                }
                while chars.peek().is_some_and(|(j, _)| *j <= i + close) {
                    chars.next();
                }
            }
            '}' | ']' => return Err(format!("unmatched '{c}' at position {}", i + 1)),
            other => text.push(other),
        }
    }
    pieces.push(Piece::Text(text));
    let mut out = vec![Expanded { url: String::new(), values: Vec::new() }];
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.iter_mut().for_each(|e| e.url.push_str(&t)),
            Piece::Set(values) => {
                if out.len().saturating_mul(values.len()) > MAX_URLS {
                    return Err(format!("the pattern names more than {MAX_URLS} URLs"));
                }
                out = out
                    .into_iter()
                    .flat_map(|e| {
                        values.iter().map(move |v| {
                            let mut next = e.clone();
                            next.url.push_str(v);
                            next.values.push(v.clone());
                            next
                        })
                    })
                    .collect();
            }
        }
    }
    Ok(out)
}

/// `1-10`, `01-10` (zero-padded to the first's width), `a-z`, with `:STEP`.
fn range(inner: &str) -> Result<Vec<String>, String> {
    let (span, step) = match inner.split_once(':') {
        Some((span, step)) => (span, step.parse::<u64>().map_err(|_| "bad step".to_owned())?),
        None => (inner, 1),
    };
    if step == 0 {
        return Err("a step of 0".into());
    }
    let (from, to) = span.split_once('-').ok_or("expected FROM-TO")?;
    let step = usize::try_from(step).unwrap_or(usize::MAX);
    if let (Ok(a), Ok(b)) = (from.parse::<u64>(), to.parse::<u64>()) {
        if a > b {
            return Err("the range goes backwards".into());
        }
        if (b - a) / step as u64 >= MAX_URLS as u64 {
            return Err(format!("more than {MAX_URLS} values"));
        }
        let width = if from.starts_with('0') && from.len() > 1 { from.len() } else { 0 };
        return Ok((a..=b).step_by(step).map(|n| format!("{n:0width$}")).collect());
    }
    let (mut a, mut b) = (from.chars(), to.chars());
    match (a.next(), a.next(), b.next(), b.next()) {
        (Some(x), None, Some(y), None)
            if x <= y
                && (x.is_ascii_lowercase() && y.is_ascii_lowercase()
                    || x.is_ascii_uppercase() && y.is_ascii_uppercase()) =>
        {
            Ok((x..=y).step_by(step).map(String::from).collect())
        }
        _ => Err("not a range of numbers or of letters".into()),
    }
}

/// An `-o` name with `#N` replaced by the Nth pattern's value (`#N` past
/// the patterns is kept as it is).
#[must_use]
pub fn output_name(template: &str, values: &[String]) -> String {
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '#' && chars.peek().is_some_and(char::is_ascii_digit) {
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            match digits.parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|n| values.get(n)) {
                Some(v) => out.push_str(v),
                None => {
                    out.push('#');
                    out.push_str(&digits);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(p: &str) -> Vec<String> {
        expand(p).unwrap().into_iter().map(|e| e.url).collect()
    }

    #[test]
    fn sets_ranges_padding_steps_and_letters() {
        assert_eq!(urls("http://a/"), ["http://a/"]);
        assert_eq!(urls("http://a/[08-10]"), ["http://a/08", "http://a/09", "http://a/10"]);
        assert_eq!(urls("http://a/[1-7:3]"), ["http://a/1", "http://a/4", "http://a/7"]);
        assert_eq!(urls("http://a/[x-z]"), ["http://a/x", "http://a/y", "http://a/z"]);
        assert_eq!(urls("http://a/{,b}"), ["http://a/", "http://a/b"]);
        assert_eq!(urls("http://[::1]:80/{a,b}"), ["http://[::1]:80/a", "http://[::1]:80/b"]);
        assert_eq!(urls("http://a/\\{x\\}"), ["http://a/{x}"]);
        let e = expand("http://a/{x,y}[1-2]").unwrap();
        assert_eq!(e[3].values, ["y", "2"]);
        assert_eq!(output_name("f_#1_#2_#3.txt", &e[3].values), "f_y_2_#3.txt");
        for bad in [
            "http://a/{x",
            "http://a/[1-",
            "http://a/[3-1]",
            "http://a/[a-9]",
            "http://a/]",
            "http://a/[1-2:0]",
        ] {
            assert!(expand(bad).is_err(), "{bad}");
        }
        assert!(expand("http://a/[1-1000][1-1000]").unwrap_err().contains("more than"));
    }
}
