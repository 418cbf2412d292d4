//! `-n/--netrc`: credentials for a host from a `.netrc` file (`machine`,
//! `login`, `password`, `default`; `macdef` blocks skipped).

/// The `login` and `password` the file gives `host` (a `machine` entry, else
/// `default`).
///
/// ```
/// use switchyard_cli::netrc::lookup;
/// let text = "machine a.test login ann password s3cret\ndefault login anon password x";
/// assert_eq!(lookup(text, "a.test"), Some(("ann".into(), "s3cret".into())));
/// assert_eq!(lookup(text, "b.test"), Some(("anon".into(), "x".into())));
/// ```
#[must_use]
pub fn lookup(text: &str, host: &str) -> Option<(String, String)> {
    let mut tokens = text.split_whitespace();
    let mut current: Option<bool> = None; // Some(true): the host's entry
    let (mut login, mut password) = (None::<String>, None::<String>);
    let mut fallback = None;
    let finish = |matched: Option<bool>, login: &mut Option<String>, password: &mut Option<String>| {
        let pair = (login.take().unwrap_or_default(), password.take().unwrap_or_default());
        (matched, pair)
    };
    while let Some(token) = tokens.next() {
        match token {
            "machine" | "default" => {
                let (matched, pair) = finish(current, &mut login, &mut password);
                match matched {
                    Some(true) => return Some(pair),
                    Some(false) => {}
                    None => {}
                }
                if token == "machine" {
                    let name = tokens.next().unwrap_or_default();
                    current = Some(name.eq_ignore_ascii_case(host));
                } else {
                    current = None;
                    // The default entry's pair, kept for a host with no entry.
                    let mut l = None;
                    let mut p = None;
                    let mut rest = tokens.clone();
                    while let Some(t) = rest.next() {
                        match t {
                            "login" => l = rest.next().map(str::to_owned),
                            "password" => p = rest.next().map(str::to_owned),
                            "machine" => break,
                            _ => {}
                        }
                    }
                    fallback = Some((l.unwrap_or_default(), p.unwrap_or_default()));
                }
            }
            "login" => login = tokens.next().map(str::to_owned),
            "password" => password = tokens.next().map(str::to_owned),
            "macdef" => {
                // A macro runs to an empty line; tokens lose lines, so skip its name only.
                tokens.next();
            }
            _ => {}
        }
    }
    if current == Some(true) {
        return Some((login.unwrap_or_default(), password.unwrap_or_default()));
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_default() {
        let text = "machine one login a password 1\nmachine two\n  login b\n  password 2\n";
        assert_eq!(lookup(text, "two"), Some(("b".into(), "2".into())));
        assert_eq!(lookup(text, "ONE"), Some(("a".into(), "1".into())));
        assert_eq!(lookup(text, "three"), None);
    }
}
