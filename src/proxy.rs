//! Proxy URLs: parsed once by a real URL parser, kept in two renderings, the one a client needs
//! (with credentials) and the one everything else may print (password masked as httpx does).

use crate::error::{Error, Result};
use crate::mask::{mask_raw, MASK};
use crate::proxy_syntax::{scheme_end, Scheme};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use std::fmt;

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
/// Decodes `%XX` escapes and keeps a `%` that starts no escape as itself, so that passwords
/// written raw (`100%`) and written encoded (`p%40ss`) both work.
fn decode_lenient(s: &str) -> std::result::Result<String, std::str::Utf8Error> {
    percent_decode_str(s).decode_utf8().map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
