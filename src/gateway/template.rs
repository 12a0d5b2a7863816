//! Credential templates: `"{user}-cc-{country}-session-{session}"`. A placeholder is a name in
//! braces; `{{` and `}}` are literal braces. The names `user`, `password`, `session` and
//! `lifetime` are the gateway's own; any other name is a tag the gateway must be given.

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    User,
    Password,
    Session,
    Lifetime,
    Tag(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

/// What a template is filled with: the proxy URL's own credentials, the slot's token, the
/// lifetime in the provider's unit, and the tags.
pub struct Fill<'a> {
    pub user: &'a str,
    pub password: &'a str,
    pub session: &'a str,
    pub lifetime: &'a str,
    pub tags: &'a [(String, String)],
}

impl Template {
    /// Parses `src`; `what` names the template in errors ("username template"). `shown` is
    /// false for a password template, whose text is never printed (it may hold the password).
    pub fn parse(src: &str, what: &str, shown: bool) -> Result<Template> {
        let quoted = if shown { format!(" {:?}", crate::mask::mask_raw(src)) } else { String::new() };
        let bad = |why: String| Error::BadInput(format!("{what}{quoted}: {why}"));
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = src.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|p| p.1) == Some('{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek().map(|p| p.1) == Some('}') => {
                    chars.next();
                    text.push('}');
                }
                '}' => return Err(bad(format!("a '}}' at character {} closes no placeholder (write '}}}}' for a literal brace)", i + 1))),
                '{' => {
                    let rest = &src[i + 1..];
                    let end = rest.find('}').ok_or_else(|| bad(format!("the '{{' at character {} is never closed", i + 1)))?;
                    let name = &rest[..end];
                    let valid = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !name.as_bytes()[0].is_ascii_digit();
                    if !valid {
                        let name = if shown { format!(" {{{name}}}") } else { String::new() };
                        return Err(bad(format!(
                            "unknown placeholder{name} at character {}: a placeholder is a name of letters, digits and '_' \
                             ({{user}}, {{password}}, {{session}}, {{lifetime}} or a tag such as {{country}})",
                            i + 1
                        )));
                    }
                    for _ in 0..=name.chars().count() {
                        chars.next();
                    }
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(match name {
                        "user" => Piece::User,
                        "password" => Piece::Password,
                        "session" => Piece::Session,
                        "lifetime" => Piece::Lifetime,
                        tag => Piece::Tag(tag.to_owned()),
                    });
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Template { pieces })
    }

    pub fn uses(&self, piece: &Piece) -> bool {
        self.pieces.contains(piece)
    }

    /// The tag names the template refers to, in order of appearance.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Tag(t) => Some(t.as_str()),
            _ => None,
        })
    }

    /// The filled text. Tags the template names were checked when the gateway was made.
    pub fn render(&self, fill: &Fill<'_>) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::User => out.push_str(fill.user),
                Piece::Password => out.push_str(fill.password),
                Piece::Session => out.push_str(fill.session),
                Piece::Lifetime => out.push_str(fill.lifetime),
                Piece::Tag(name) => out.push_str(fill.tags.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill<'a>(tags: &'a [(String, String)]) -> Fill<'a> {
        Fill { user: "customer-c1", password: "pw", session: "abc123", lifetime: "10", tags }
    }

    #[test]
    fn fills_every_placeholder_and_literal_braces() {
        let tags = vec![("country".to_owned(), "de".to_owned())];
        let t = Template::parse("{user}-cc-{country}-sessid-{session}-sesstime-{lifetime}", "username template", true).unwrap();
        assert_eq!(t.render(&fill(&tags)), "customer-c1-cc-de-sessid-abc123-sesstime-10");
        assert!(t.uses(&Piece::Session));
        assert_eq!(t.tags().collect::<Vec<_>>(), ["country"]);
        let t = Template::parse("{password}_{{x}}_{session}", "password template", false).unwrap();
        assert_eq!(t.render(&fill(&tags)), "pw_{x}_abc123");
        assert!(!Template::parse("{user}", "username template", true).unwrap().uses(&Piece::Session));
    }

    #[test]
    fn malformed_placeholders_are_refused_by_position() {
        for (src, needle) in [
            ("{user}-{}", "unknown placeholder {} at character 8"),
            ("{user}-{a-b}", "unknown placeholder {a-b}"),
            ("{1x}", "unknown placeholder {1x}"),
            ("{user", "never closed"),
            ("user}", "closes no placeholder"),
        ] {
            let e = Template::parse(src, "username template", true).unwrap_err().to_string();
            assert!(e.contains(needle) && e.starts_with("username template"), "{src}: {e}");
        }
    }

    #[test]
    fn a_password_template_is_never_shown_in_an_error() {
        let e = Template::parse("hunter2_{bad-name}", "password template", false).unwrap_err().to_string();
        assert!(!e.contains("hunter2") && !e.contains("bad-name"), "{e}");
        assert!(e.contains("unknown placeholder at character 9"), "{e}");
    }
}
