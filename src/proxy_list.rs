//! Proxy lists as users keep them: one exit a line, in any of the shapes providers hand out.
//!
//! A line is whitespace-separated tokens: an optional id, the proxy, and `key=value` fields
//! (`id=`, `ip=`, `capacity=`, anything else is a tag). The proxy is a full URL, `host:port`,
//! `host:port:user:pass` or `user:pass@host:port`; the bare shapes mean `http://`.
//! `#` starts a comment at the start of a line or after whitespace.
//!
//! The exit id, unless given, is `user@host:port` (or `host:port` without a user): a password
//! change keeps the id, so the ring keeps every account where it was, while two sticky-session
//! users on one gateway stay two exits.

use crate::error::{Error, Result};
use crate::exit::{validate_capacity, validate_id, Exit};
use crate::mask::{mask_raw, MASK};
use crate::proxy::ProxyUrl;
use crate::proxy_syntax::{host_port_user_pass, is_port, scheme_end, Scheme};
use std::collections::HashMap;
use std::net::IpAddr;

/// Parses every line; the first bad line stops the parse and is named in the error.
pub fn parse(lines: &[&str]) -> Result<Vec<Exit>> {
    let mut exits: Vec<Exit> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (n, line) in lines.iter().enumerate() {
        let lineno = n + 1;
        // Editors on Windows start UTF-8 files with a byte-order mark; it is no part of an id.
        let line = if n == 0 { line.strip_prefix('\u{feff}').unwrap_or(line) } else { line };
        let Some(exit) = parse_line(line).map_err(|e| at_line(lineno, e))? else { continue };
        if let Some(first) = seen.insert(exit.id.clone(), lineno) {
            return Err(Error::BadProxy(format!(
                "duplicate exit id {:?} on lines {first} and {lineno} (an id column tells them apart: `id=NAME`)",
                exit.id
            )));
        }
        exits.push(exit);
    }
    Ok(exits)
}

fn at_line(lineno: usize, e: Error) -> Error {
    Error::BadProxy(format!("line {lineno}: {e}"))
}

/// One line: `Ok(None)` for blanks and comments.
pub fn parse_line(line: &str) -> Result<Option<Exit>> {
    let content = strip_comment(line).trim();
    if content.is_empty() {
        return Ok(None);
    }
    let tokens: Vec<&str> = content.split_whitespace().collect();
    // A password may hold a space, which splits it into tokens: every token after the first
    // one that may carry a password may be the rest of it, and no message shows it.
    let secret_from = tokens.iter().position(|t| may_carry_password(t)).map_or(tokens.len(), |i| i + 1);
    let mut positional: Vec<(usize, &str)> = Vec::new();
    let (mut id, mut ip, mut capacity) = (None, None, None);
    let mut tags = Vec::new();
    for (i, &token) in tokens.iter().enumerate() {
        match field(token) {
            Some(("id", v)) => id = Some((i, v)),
            Some(("ip", v)) => ip = Some((i, v)),
            Some(("capacity", v)) => capacity = Some((i, v)),
            Some((k, v)) => tags.push((k.to_owned(), v.to_owned())),
            None => positional.push((i, token)),
        }
    }
    // How a message may quote token `i`: masked, or not at all past a possible password.
    // The token where the password starts, when tokens follow it: a password may hold an `@`
    // as well as a space, so this token's own "host" may be password too, and is left out.
    let followed = secret_from < tokens.len();
    // What comes before the mask is shown only when the token parses as a proxy: the parser
    // then knows where its password starts. Otherwise masking can only guess (`u:pw::rest`),
    // and the guess may leave part of a password in the open.
    fn masked(t: &str, password_token: bool) -> String {
        let shown = mask_raw(t);
        match shown.find(MASK) {
            _ if !password_token => shown,
            Some(i) if parse_proxy_token(t).is_ok() => shown[..i + MASK.len()].to_owned(),
            _ => MASK.to_owned(),
        }
    }
    let quote = |i: usize, what: &str, value: &str| {
        if i < secret_from {
            format!("{what} {:?}", masked(value, followed && i + 1 == secret_from))
        } else {
            format!("the {what} (not shown: {SPACE_IN_PASSWORD})")
        }
    };
    let proxy_token = match positional.as_slice() {
        [(_, proxy)] => *proxy,
        [(i, first), (_, proxy)] if id.is_none() => {
            // An id never carries a password: a first token that does is a second proxy, and
            // taking it as the id would show its password wherever ids are shown.
            // Masking is the wider net: it also hides what only looks like a password.
            if may_carry_password(first) {
                return Err(Error::BadProxy(format!(
                    "two proxies on one line, or a password with a space: {} and one more token (not shown: {SPACE_IN_PASSWORD}); \
                     one exit a line, and a password with a space goes in a URL, percent-encoded (`http://user:pass%20word@host:port`)",
                    quote(*i, "proxy", first)
                )));
            }
            id = Some((*i, *first));
            *proxy
        }
        _ => {
            let shown: Vec<String> =
                positional.iter().filter(|(i, _)| *i < secret_from).map(|(i, t)| masked(t, followed && i + 1 == secret_from)).collect();
            let hidden = positional.len() - shown.len();
            let more = if hidden > 0 { format!(" and {hidden} more (not shown: {SPACE_IN_PASSWORD})") } else { String::new() };
            return Err(Error::BadProxy(format!(
                "expected `[ID] PROXY [key=value ...]`, got {:?}{more}; a password with a space goes in a URL, percent-encoded",
                shown.join(" ")
            )));
        }
    };
    let proxy = parse_proxy_token(proxy_token)?;
    let id = match id {
        Some((i, id)) => validate_id(id).map_err(|e| {
            if i < secret_from {
                e
            } else {
                Error::BadInput(format!("{} must be non-empty, without surrounding spaces or control characters", quote(i, "exit id", id)))
            }
        })?,
        // A user name can hold what an id may not (control characters).
        None => validate_id(&derived_id(&proxy))?,
    };
    let capacity = match capacity {
        None => 1,
        Some((i, c)) => c
            .parse::<i64>()
            .map_err(|_| Error::BadInput(format!("{} is not a whole number", quote(i, "capacity", c))))
            // The core's message names the number: put the quote (which may hide it) in its place.
            .and_then(|n| {
                validate_capacity(n).map_err(|e| {
                    if i < secret_from {
                        e
                    } else {
                        Error::BadInput(e.to_string().replacen(&format!("capacity {n}"), &quote(i, "capacity", c), 1))
                    }
                })
            })?,
    };
    let ip = ip
        .map(|(i, s)| s.parse::<IpAddr>().map_err(|_| Error::BadInput(format!("{} is not an IP address", quote(i, "ip", s)))))
        .transpose()?;
    tags.sort();
    Ok(Some(Exit { id, proxy, ip, capacity, tags, gateway: None }))
}

/// Why a message leaves a token out.
const SPACE_IN_PASSWORD: &str = "it follows a password and may be part of it";

/// Whether a token may hold (the start of) a password: a URL, text masking would change, or a
/// proxy shape with one. Masking is the wider net: it also catches what only looks like one.
fn may_carry_password(token: &str) -> bool {
    scheme_end(token).is_some() || mask_raw(token) != token || parse_proxy_token(token).is_ok_and(|p| p.password().is_some())
}

/// A `key=value` token; the key must look like an identifier, which no proxy shape does
/// (a URL's `scheme:` and a host's `:` come before any `=`).
fn field(token: &str) -> Option<(&str, &str)> {
    let (k, v) = token.split_once('=')?;
    let mut chars = k.chars();
    let first = chars.next()?;
    let ident = (first.is_ascii_alphabetic() || first == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    ident.then_some((k, v))
}

fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return &line[..i];
        }
    }
    line
}

fn parse_proxy_token(token: &str) -> Result<ProxyUrl> {
    if scheme_end(token).is_some() {
        return ProxyUrl::parse(token);
    }
    // `host:port:user:pass` first: its password may hold an `@`, and its port is all digits,
    // which the `user` of `user:pass@host:port` never is next to a colon-free host.
    if let Some((host, port, user, pass)) = host_port_user_pass(token) {
        return ProxyUrl::from_parts(Scheme::Http, &format!("{host}:{port}"), Some(user), Some(pass));
    }
    let parts: Vec<&str> = token.splitn(4, ':').collect();
    let numeric_port = parts.len() >= 2 && is_port(parts[1]);
    match parts.as_slice() {
        _ if token.contains('@') => ProxyUrl::parse_shown(&format!("http://{token}"), Some(&mask_raw(token))),
        [_, _] if numeric_port => ProxyUrl::from_parts(Scheme::Http, token, None, None),
        _ => Err(Error::BadProxy(format!(
            "cannot read {:?} as a proxy (expected a URL, host:port, host:port:user:pass or user:pass@host:port)",
            mask_raw(token)
        ))),
    }
}

fn derived_id(proxy: &ProxyUrl) -> String {
    match proxy.username() {
        Some(u) if !u.is_empty() => format!("{u}@{}:{}", proxy.host(), proxy.port()),
        _ => format!("{}:{}", proxy.host(), proxy.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_becomes_an_id() {
        for line in [
            "http://u:hunter2@gw.example:8000 gw.example:9000",
            "u:hunter2@gw.example:8000 gw.example:9000",
            "user:hunter2://x@gw.example:8000",
            "\u{1}user:hunter2@gw.example:8000",
            // Found by fuzzing: an IPv6 provider line used to pass for an id.
            "[::1]:8000:user:hunter2 gw.example:8001",
        ] {
            match parse(&[line]) {
                Ok(exits) => assert!(exits.iter().all(|e| !e.id.contains("hunter2")), "{line}: {exits:?}"),
                Err(e) => assert!(!e.to_string().contains("hunter2"), "{line}: {e}"),
            }
        }
        assert!(parse(&["\u{1}user:pw@gw.example:8000"]).is_err(), "a control character in a derived id is refused");
    }

    #[test]
    fn no_message_shows_what_may_continue_a_password_with_a_space() {
        for line in [
            "gw.example:8000:user:abc defSECRET",
            "gw.example:8000:user:abc defSECRET ghiSECRET",
            "http://user:abc defSECRET@gw.example:8000",
            "user:abc defSECRET:x@gw.example:8000",
            "sess-1 gw.example:8000:user:abc defSECRET",
            "gw.example:8000:user:abc capacity=defSECRET",
            "gw.example:8000:user:abc ip=defSECRET",
            "gw.example:8000:user:abc capacity=99999999",
            "gw.example:8000:user:abc capacity=-99999999",
            "gw.example:8000:user:abc id=\u{1}defSECRET",
            // Found by fuzzing: the first token reads as a URL whose host is password.
            "http://user:abc@hostSECRET defSECRET@gw.example:8000",
            "user:abc;@defSECRET@10.0.0.1:3420 9x=",
        ] {
            let e = parse(&[line]).unwrap_err().to_string();
            assert!(!e.contains("SECRET") && !e.contains("abc") && !e.contains("9999"), "{line}: {e}");
        }
        // Before any password, tokens are still quoted: the message says what is wrong.
        let e = parse(&["capacity=lots gw.example:8000:user:pw"]).unwrap_err().to_string();
        assert!(e.contains("\"lots\""), "{e}");
        // The form that carries a space unambiguously: a URL, percent-encoded.
        let e = parse_line("http://user:abc%20defSECRET@gw.example:8000").unwrap().unwrap();
        assert_eq!(e.proxy.password(), Some("abc defSECRET"));
    }

    #[test]
    fn every_shape_users_have() {
        let lines = [
            "# provider A",
            "",
            "gw.example:8000",
            "gw.example:8001:user-sess-1:p@ss:word  # inline comment",
            "user-sess-2:secret@gw.example:8001",
            "socks5://u:pw@10.0.0.1:1080 ip=93.184.10.7 capacity=3 country=DE",
            "sess-a1b2 http://u:pw@gw.example:9000",
            "http://u:pw@gw.example:9001 id=sess-c3d4",
        ];
        let exits = parse(&lines).unwrap();
        let ids: Vec<&str> = exits.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["gw.example:8000", "user-sess-1@gw.example:8001", "user-sess-2@gw.example:8001", "u@10.0.0.1:1080", "sess-a1b2", "sess-c3d4"]
        );
        assert_eq!(exits[1].proxy.password(), Some("p@ss:word"));
        assert_eq!(exits[3].capacity, 3);
        assert_eq!(exits[3].tag("country"), Some("DE"));
        assert_eq!(exits[3].ip, Some("93.184.10.7".parse().unwrap()));
    }

    #[test]
    fn an_ipv6_provider_line_reads_as_one_exit() {
        let e = parse_line("[::1]:8000:user-7:p@ss:w").unwrap().unwrap();
        assert_eq!((e.id.as_str(), e.proxy.password()), ("user-7@[::1]:8000", Some("p@ss:w")));
    }

    #[test]
    fn an_ip_address_is_an_id() {
        for id in ["2001:db8::1", "[2001:db8::1]:8000", "93.184.10.7"] {
            let e = parse_line(&format!("{id} http://u:pw@gw.example:8000")).unwrap().unwrap();
            assert_eq!(e.id, id);
        }
    }

    #[test]
    fn id_survives_a_password_change() {
        let a = parse_line("gw:1:user:old").unwrap().unwrap();
        let b = parse_line("gw:1:user:new").unwrap().unwrap();
        assert_eq!(a.id, b.id);
    }

    #[test]
    fn errors_name_the_line_and_mask_the_password() {
        let e = parse(&["gw:1", "capacity=-1 gw:1:user:hunter2:x"]).unwrap_err().to_string();
        assert!(e.starts_with("line 2:") && e.contains("capacity -1") && !e.contains("hunter2"), "{e}");
        // After a password, a field may be the rest of it (a password with a space): not shown.
        let e = parse(&["gw:1", "gw:1:user:hunter2:x capacity=-1"]).unwrap_err().to_string();
        assert_eq!(e, "line 2: the capacity (not shown: it follows a password and may be part of it) is outside 1..=10000");
        let e = parse(&["gw:1:u:hunter2", "gw:1:u:hunter3"]).unwrap_err().to_string();
        assert!(e.contains("lines 1 and 2") && !e.contains("hunter"), "{e}");
        let e = parse(&["ftp://u:hunter2@h:1"]).unwrap_err().to_string();
        assert!(e.starts_with("line 1:") && !e.contains("hunter2"), "{e}");
        let e = parse(&["a b c"]).unwrap_err().to_string();
        assert!(e.contains("expected"), "{e}");
    }
}
