//! Proxy URLs: parsed once by a real URL parser, kept in two renderings, the one a client needs
//! (with credentials) and the one everything else may print (password masked as httpx does).

use crate::error::{Error, Result};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use std::fmt;

/// What httpx prints in place of a password; users already know it.
pub const MASK: &str = "[secure]";

/// Characters that cannot stand raw in a URL's userinfo (RFC 3986 plus WHATWG's extras).
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b';')
    .add(b'<')
    .add(b'=')
    .add(b'>')
    .add(b'?')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    Socks5,
    Socks5h,
}

impl Scheme {
    fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            "socks5" => Some(Scheme::Socks5),
            "socks5h" => Some(Scheme::Socks5h),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Socks5 => "socks5",
            Scheme::Socks5h => "socks5h",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            // SOCKS has no port a URL parser knows; guessing 1080 would hide a typo.
            Scheme::Socks5 | Scheme::Socks5h => None,
        }
    }
}

#[derive(Clone, PartialEq, Eq)]
pub struct ProxyUrl {
    scheme: Scheme,
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    full: String,
    masked: String,
}

impl ProxyUrl {
    /// Parses `scheme://[user[:pass]@]host[:port][/]`. Credentials may hold `@ / : #` raw or
    /// percent-encoded: the userinfo is everything before the last `@`, and a `%XX` in it is
    /// read as an escape (so a literal `%41` must be written `%2541`).
    pub fn parse(raw: &str) -> Result<ProxyUrl> {
        Self::parse_shown(raw, None)
    }

    /// `parse`, naming the input in errors as `shown` (already masked) when the URL was made
    /// from other text, which is what the user wrote and what must be masked.
    pub fn parse_shown(raw: &str, shown: Option<&str>) -> Result<ProxyUrl> {
        let raw = raw.trim();
        let shown = shown.map_or_else(|| mask_raw(raw), str::to_owned);
        let bad = |why: &str| Error::BadProxy(format!("bad proxy URL {shown:?}: {why}"));
        let end = scheme_end(raw).ok_or_else(|| bad("no scheme (expected http://, https://, socks5:// or socks5h://)"))?;
        let (scheme_str, rest) = (&raw[..end - 3], &raw[end..]);
        let scheme = Scheme::parse(scheme_str).ok_or_else(|| bad("unsupported scheme (expected http, https, socks5 or socks5h)"))?;
        let (userinfo, hostpart) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (user, pass) = match userinfo {
            None => (None, None),
            Some(ui) => {
                let (u, p) = match ui.split_once(':') {
                    Some((u, p)) => (u, Some(p)),
                    None => (ui, None),
                };
                (
                    Some(decode_lenient(u).map_err(|_| bad("username is not UTF-8 once decoded"))?),
                    p.map(decode_lenient).transpose().map_err(|_| bad("password is not UTF-8 once decoded"))?,
                )
            }
        };
        Self::build(scheme, hostpart, user, pass).map_err(|why| bad(&why))
    }

    /// Builds from parts whose credentials are literal (no percent-decoding), as proxy lists in
    /// `host:port:user:pass` form write them.
    pub fn from_parts(scheme: Scheme, hostport: &str, user: Option<&str>, pass: Option<&str>) -> Result<ProxyUrl> {
        let shown = match user {
            Some(u) => format!("{}://{u}:{MASK}@{hostport}", scheme.as_str()),
            None => format!("{}://{hostport}", scheme.as_str()),
        };
        Self::build(scheme, hostport, user.map(str::to_owned), pass.map(str::to_owned))
            .map_err(|why| Error::BadProxy(format!("bad proxy {shown:?}: {why}")))
    }

    fn build(scheme: Scheme, hostpart: &str, user: Option<String>, pass: Option<String>) -> std::result::Result<ProxyUrl, String> {
        let user = user.filter(|u| !u.is_empty() || pass.is_some());
        let hostpart = hostpart.strip_suffix('/').unwrap_or(hostpart);
        if hostpart.is_empty() {
            return Err("no host".into());
        }
        if hostpart.contains(['/', '?', '#']) {
            return Err("a proxy URL has no path, query or fragment".into());
        }
        // The host and port go through the URL parser proper: IDNA, IPv6 brackets, port range.
        let parsed = url::Url::parse(&format!("http://{hostpart}")).map_err(|e| format!("{e}"))?;
        let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or("no host")?.to_owned();
        // The http parser forgets a port equal to http's default (`:80`, `:080`); a scheme with
        // no default keeps whatever was written.
        let written = url::Url::parse(&format!("x-exitpool://{hostpart}")).ok().and_then(|u| u.port());
        let port = match written.or(parsed.port()) {
            Some(0) => return Err("port 0 cannot be connected to".into()),
            Some(p) => p,
            None => scheme.default_port().ok_or_else(|| format!("{} proxy needs a port", scheme.as_str()))?,
        };
        let enc = |s: &str| utf8_percent_encode(s, USERINFO).to_string();
        let (full, masked) = match (&user, &pass) {
            (Some(u), Some(p)) => (
                format!("{}://{}:{}@{host}:{port}", scheme.as_str(), enc(u), enc(p)),
                format!("{}://{}:{MASK}@{host}:{port}", scheme.as_str(), enc(u)),
            ),
            (Some(u), None) => {
                let s = format!("{}://{}@{host}:{port}", scheme.as_str(), enc(u));
                (s.clone(), s)
            }
            (None, _) => {
                let s = format!("{}://{host}:{port}", scheme.as_str());
                (s.clone(), s)
            }
        };
        Ok(ProxyUrl { scheme, host, port, username: user, password: pass, full, masked })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }
    pub fn host(&self) -> &str {
        &self.host
    }
    pub fn port(&self) -> u16 {
        self.port
    }
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }
    /// The URL a client connects through, credentials included. Never log this.
    pub fn as_str(&self) -> &str {
        &self.full
    }
    /// The URL with its password replaced by `[secure]`: the only rendering fit to print.
    pub fn masked(&self) -> &str {
        &self.masked
    }
    /// The URL without any credentials, for clients that send them in a header instead.
    pub fn without_credentials(&self) -> String {
        format!("{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProxyUrl({:?})", self.masked)
    }
}

impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked)
    }
}

/// Where a URL's scheme and its `://` end, if `raw` starts with one: a scheme is a letter
/// then letters, digits, `+`, `-` or `.` (RFC 3986), so a `://` inside a password is none.
pub fn scheme_end(raw: &str) -> Option<usize> {
    let i = raw.find("://")?;
    let scheme = &raw[..i];
    let mut chars = scheme.chars();
    let ok =
        chars.next().is_some_and(|c| c.is_ascii_alphabetic()) && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some(i + 3)
}

/// `host:port` (or a bare `host` unless `port_required`), the host a name, an IPv4 address
/// or a bracketed IPv6 address, the port all digits: text with no room for a password.
fn is_host_port(raw: &str, port_required: bool) -> bool {
    let (host_ok, port) = if let Some(rest) = raw.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else { return false };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        (is_ip(v6), port)
    } else {
        let name = |h: &str| !h.is_empty() && h.chars().all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_'));
        match raw.rsplit_once(':') {
            Some((h, p)) => (name(h), Some(p)),
            None => (name(raw), None),
        }
    };
    let port_ok = port.map_or(!port_required, is_port);
    host_ok && port_ok
}

/// An IP address, an IPv6 one possibly with a zone (`fe80::1%eth0`, or `%25eth0` as URLs
/// write it): text with no room for a password.
fn is_ip(raw: &str) -> bool {
    if raw.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let Some((addr, zone)) = raw.split_once('%') else {
        return false;
    };
    let zone = zone.strip_prefix("25").filter(|z| !z.is_empty()).unwrap_or(zone);
    addr.parse::<std::net::Ipv6Addr>().is_ok()
        && !zone.is_empty()
        && zone.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Splits the `host:port:user:pass` shape providers hand out (the host bracketed when it is
/// IPv6: `[::1]:8000:user:pass`). The password is everything after the third field's colon,
/// so it may hold anything, `@` and `:` included; the port must be all digits.
pub fn host_port_user_pass(raw: &str) -> Option<(&str, &str, &str, &str)> {
    let (host, rest) = if raw.starts_with('[') {
        let end = raw.find(']')?;
        (&raw[..=end], raw[end + 1..].strip_prefix(':')?)
    } else {
        raw.split_once(':')?
    };
    let (port, rest) = rest.split_once(':')?;
    let (user, pass) = rest.split_once(':')?;
    is_port(port).then_some((host, port, user, pass))
}

/// A port as proxy lists write one: digits, at least one.
pub fn is_port(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Decodes `%XX` escapes and keeps a `%` that starts no escape as itself, so that passwords
/// written raw (`100%`) and written encoded (`p%40ss`) both work.
fn decode_lenient(s: &str) -> std::result::Result<String, std::str::Utf8Error> {
    percent_decode_str(s).decode_utf8().map(|c| c.into_owned())
}

/// `text` with every one of `secrets` in it replaced by [`MASK`], the longest first (a longer
/// secret may hold a shorter one): for messages a library wrote around a known secret.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&str> = secrets.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    secrets.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    secrets.dedup();
    secrets.iter().fold(text.to_owned(), |text, secret| text.replace(secret, MASK))
}

/// A user's text as an error message quotes it: masked, then quoted and escaped. Every error
/// that echoes a string the user gave goes through here, whatever the string was meant to be:
/// a proxy URL typed into the wrong place must not come back with its password.
pub fn shown(raw: &str) -> String {
    format!("{:?}", mask_raw(raw))
}

/// Masks whatever could be a password in text that failed to parse, for error messages.
/// It errs on the side of hiding: everything between the first `:` of the userinfo and the
/// last `@`, or everything after the third `:` of a `host:port:user:pass` line.
pub fn mask_raw(raw: &str) -> String {
    // A `://` after a word that is no valid scheme (`h*tps://u:pw`) still starts a URL's
    // userinfo; one after a `:` or `@` is inside a password (`user:pw://x@host`).
    let mangled = || raw.find("://").filter(|&i| !raw[..i].contains([':', '@'])).map(|i| i + 3);
    let scheme = scheme_end(raw);
    // A proxy URL's userinfo ends at its last `@` (WHATWG): what follows is its host and port.
    let proxy_url = scheme.is_some_and(|i| Scheme::parse(&raw[..i - 3]).is_some());
    let url_start = scheme.or_else(mangled);
    let (prefix, rest) = match url_start {
        Some(i) => raw.split_at(i),
        None => ("", raw),
    };
    // An IP address holds no password, even one that splits like `host:port:user:pass`
    // (`0:0:0:1::`).
    if prefix.is_empty() && is_ip(raw) {
        return raw.to_owned();
    }
    // `host:port:user:pass` first: its password may hold an `@` (or anything else).
    if let (true, Some((host, port, user, _))) = (prefix.is_empty(), host_port_user_pass(rest)) {
        return format!("{host}:{port}:{user}:{MASK}");
    }
    if let Some(at) = rest.rfind('@') {
        let userinfo = &rest[..at];
        let tail = &rest[at + 1..];
        // Other text that failed to parse may be no URL even after a scheme-like word (a
        // `host:port:user:pass` line whose host is a word and whose user holds an `@` puts the
        // password after the `@`): which part is the password is anyone's guess. Unless what
        // follows the `@` is a plain `host[:port]`, only the first field is shown.
        // Even after a real scheme, a "host" with whitespace in it (`@ ss word`: a password
        // with an `@` and a space in it) is hidden.
        let plain = if proxy_url { !tail.contains(char::is_whitespace) } else { is_host_port(tail.trim_end_matches('/'), false) };
        if !plain {
            let first = rest.split([':', '@']).next().unwrap_or("");
            return format!("{prefix}{first}:{MASK}");
        }
        return match userinfo.find(':') {
            Some(c) => format!("{prefix}{}:{MASK}@{tail}", &userinfo[..c]),
            None => format!("{prefix}{userinfo}@{tail}"),
        };
    }
    if prefix.is_empty() {
        // An IP address, or a `host:port`, holds no password: shown whole (an IPv6 exit id).
        if is_host_port(raw, true) {
            return raw.to_owned();
        }
        let parts: Vec<&str> = rest.splitn(4, ':').collect();
        if parts.len() == 4 {
            return format!("{}:{}:{}:{MASK}", parts[0], parts[1], parts[2]);
        }
        // Fewer fields with no port to be sure of: which one is the password is anyone's guess.
        if let Some((first, tail)) = rest.split_once(':') {
            if !tail.bytes().all(|b| b.is_ascii_digit()) {
                return format!("{first}:{MASK}");
            }
        }
    } else if let Some((user, _)) = rest.split_once(':') {
        // `scheme://user:pass` without a host: unless the text is a plain `host:port` (an IPv6
        // address has colons of its own) with a path free of `:` and `@`, hide what follows.
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        let no_password = !path.contains([':', '@']) && (is_host_port(hostport, false) || is_ip(hostport));
        if !no_password {
            return format!("{prefix}{user}:{MASK}");
        }
    }
    raw.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_masks_every_secret_the_longest_first() {
        let secrets = ["pw".to_owned(), String::new(), "pw-long".to_owned(), "pw".to_owned()];
        assert_eq!(scrub("a pw-long and a pw", &secrets), "a [secure] and a [secure]");
        assert_eq!(scrub("nothing here", &[]), "nothing here");
    }

    #[test]
    fn masking_hides_passwords_of_every_shape() {
        for (raw, secret) in [
            ("gw.example:8000:user:p@ss-hunter2", "hunter2"),
            ("user:hunter2://x@gw.example:8000", "hunter2"),
            ("http://user:hunter2://x@gw.example:8000", "hunter2"),
            ("gw.example:8000:user:hunter2://x", "hunter2"),
            ("bücher.example:80@0:g:hunter2", "hunter2"),
            ("@gs-a::x:hunter2:80", "hunter2"),
        ] {
            let shown = mask_raw(raw);
            assert!(!shown.contains(secret), "{raw} -> {shown}");
        }
        assert_eq!(scheme_end("http://h"), Some(7));
        assert_eq!(scheme_end("user:pw://h"), None);
    }

    #[test]
    fn parses_and_masks_like_httpx() {
        let p = ProxyUrl::parse("http://user:pw@gw.example:8000").unwrap();
        assert_eq!(p.as_str(), "http://user:pw@gw.example:8000");
        assert_eq!(p.masked(), "http://user:[secure]@gw.example:8000");
        assert_eq!(p.host(), "gw.example");
        assert_eq!(p.port(), 8000);
    }

    #[test]
    fn reserved_characters_in_passwords_raw_or_encoded() {
        for raw in ["http://u:p@s/s:w#rd@h:1", "http://u:p%40s%2Fs%3Aw%23rd@h:1"] {
            let p = ProxyUrl::parse(raw).unwrap();
            assert_eq!(p.password(), Some("p@s/s:w#rd"), "{raw}");
            assert_eq!(p.host(), "h");
            assert_eq!(p.as_str(), "http://u:p%40s%2Fs%3Aw%23rd@h:1");
            assert!(!p.masked().contains("rd"));
        }
        assert_eq!(ProxyUrl::parse("http://u:100%@h:1").unwrap().password(), Some("100%"));
    }

    #[test]
    fn schemes_ports_and_errors() {
        assert_eq!(ProxyUrl::parse("http://h").unwrap().port(), 80);
        assert_eq!(ProxyUrl::parse("http://h:80").unwrap().port(), 80);
        assert_eq!(ProxyUrl::parse("https://h:080").unwrap().port(), 80);
        assert_eq!(ProxyUrl::parse("socks5://h:080").unwrap().port(), 80);
        assert_eq!(ProxyUrl::parse("https://h").unwrap().port(), 443);
        assert!(ProxyUrl::parse("http://h:0").is_err());
        assert_eq!(ProxyUrl::parse("SOCKS5H://h:1080").unwrap().scheme(), Scheme::Socks5h);
        assert_eq!(ProxyUrl::parse("http://[::1]:3128").unwrap().host(), "[::1]");
        let e = ProxyUrl::parse("socks5://u:secret@h").unwrap_err().to_string();
        assert!(e.contains("needs a port") && !e.contains("secret"), "{e}");
        let e = ProxyUrl::parse("ftp://u:secret@h:21").unwrap_err().to_string();
        assert!(e.contains("unsupported scheme") && !e.contains("secret"), "{e}");
        let e = ProxyUrl::parse("http://u:secret@h:99999").unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(ProxyUrl::parse("http://h:1/path").is_err());
        assert!(ProxyUrl::parse("gw:8000").is_err());
    }

    #[test]
    fn mask_raw_hides_passwords_in_every_shape() {
        assert_eq!(mask_raw("http://u:pw@h:1"), "http://u:[secure]@h:1");
        assert_eq!(mask_raw("u:pw@h:1"), "u:[secure]@h:1");
        assert_eq!(mask_raw("h:1:u:p:w"), "h:1:u:[secure]");
        assert_eq!(mask_raw("h:1"), "h:1");
        assert_eq!(mask_raw("http://user:pass"), "http://user:[secure]");
        assert_eq!(mask_raw("http://h:8000/"), "http://h:8000/");
        assert_eq!(mask_raw("[::1]:8000:u:p:w"), "[::1]:8000:u:[secure]");
        // Found by fuzzing: a mangled scheme, and no `@`, still hide the password.
        assert_eq!(mask_raw("h*tps://u:hunter2gw.example:8443"), "h*tps://u:[secure]");
        assert_eq!(mask_raw("u:hunter2"), "u:[secure]");
        assert_eq!(mask_raw("x(l://ht::@&:hunter2"), "x(l://ht:[secure]");
        assert_eq!(mask_raw("l://:x:&@]P1:hunter2/:"), "l://:[secure]");
        assert_eq!(mask_raw("http://u:hunter2@[::1]:8000/"), "http://u:[secure]@[::1]:8000/");
        assert_eq!(mask_raw("http://u:hunter2@[::1]"), "http://u:[secure]@[::1]");
        assert_eq!(mask_raw("l://x:y@hunter2]"), "l://x:[secure]");
        assert_eq!(mask_raw("u:hunter2@gw.example"), "u:[secure]@gw.example");
        assert_eq!(mask_raw("t::x@&/:hunter2"), "t:[secure]");
        assert_eq!(mask_raw("h:1:u:p://w"), "h:1:u:[secure]");
        for shown in ["2001:db8::1", "[2001:db8::1]:8000", "10.0.0.1:3128", "sess-a1b2", "gw.example:8000"] {
            assert_eq!(mask_raw(shown), shown);
        }
    }

    #[test]
    fn masking_leaves_what_holds_no_password() {
        // Found in issue 13: an IPv6 zone id and an out-of-range port (with a path) were hidden.
        for shown in [
            "fe80::1%eth0",
            "fe80::1%25eth0",
            "[fe80::1%eth0]:8000",
            "http://[fe80::1%25eth0]:8000",
            "redis://127.0.0.1:99999/0",
            "redis://127.0.0.1:6379/0",
            "http://gw.example:99999",
            "gw.example:99999",
            "http://[::1]:8000/",
            "socks5://10.0.0.1:1080/",
            "0:0:0:1::",
        ] {
            assert_eq!(mask_raw(shown), shown);
        }
        // ...while whatever could still be a password stays hidden.
        for (raw, secret) in [
            ("http://user:hunter2", "hunter2"),
            ("http://user:12/hunter2:x", "hunter2"),
            ("http://user:hunter2/0", "hunter2"),
            ("fe80::1%eth0:hunter2", "hunter2"),
            ("redis://:hunter2@127.0.0.1:99999/0", "hunter2"),
            // Found by fuzzing: a password with `@ ` in it, the rest taken for the host.
            ("http://10.0.0.1:80:user:Pl@ 4nte dS3cret", "S3cret"),
            ("http://u:Pl@ 4nte dS3cret@ x", "S3cret"),
        ] {
            assert!(!mask_raw(raw).contains(secret), "{raw} -> {}", mask_raw(raw));
        }
    }
}
