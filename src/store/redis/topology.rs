//! Where the store's server is: one server (`redis://`, `rediss://`, `unix://`), the primary a
//! set of Sentinels names (`redis+sentinel://`), or a Redis Cluster (`redis+cluster://`).
//!
//! The URL shapes follow the `limits` library's (`redis+sentinel://host:port,host:port/name`,
//! `redis+cluster://host:port,host:port`): the Sentinels' password in the userinfo, the data
//! nodes' in the `password` query parameter, as other `redis+sentinel://` readers take it.
//!
//! Sentinel discovery is done here rather than with the `redis` crate's `sentinel` feature:
//! that client connects to Sentinels and primaries without a timeout, and a store must never
//! hold a caller for long on an unreachable host. Cluster connections are the crate's own
//! (`cluster` feature): it follows MOVED and ASK, and routes a script by its first key, which
//! every command of the store names (the namespace's `{hash tag}`: one slot for all its keys).

use crate::error::{Error, Result};
use crate::fork::Mutex;
use crate::mask::{scrub, MASK};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::{Connection, ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError, RedisResult, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How the store reaches its primary.
pub(super) enum Target {
    One(redis::Client),
    Sentinel(Sentinels),
    Cluster(ClusterClient),
}

/// A connection to the primary (one server's, Sentinel's choice) or to the cluster.
pub(super) enum Con {
    One(Connection),
    Cluster(Box<ClusterConnection>),
}

impl ConnectionLike for Con {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self {
            Con::One(c) => c.req_packed_command(cmd),
            Con::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(&mut self, cmd: &[u8], offset: usize, count: usize) -> RedisResult<Vec<Value>> {
        match self {
            Con::One(c) => c.req_packed_commands(cmd, offset, count),
            Con::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Con::One(c) => c.get_db(),
            Con::Cluster(c) => c.get_db(),
        }
    }

    fn check_connection(&mut self) -> bool {
        match self {
            Con::One(c) => c.check_connection(),
            Con::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            Con::One(c) => c.is_open(),
            Con::Cluster(c) => c.is_open(),
        }
    }
}

/// The Sentinels that name the primary of `master`, and how to log in to the data nodes.
///
/// Replication is asynchronous: a write the primary took but no replica has yet is lost if
/// the primary fails over, and a lease (or a release) the new primary never saw would be
/// handed out twice (or held until it expires). So a write counts only once every replica the
/// primary had when the store first reached it has acknowledged it (WAIT). The count never
/// drops while Sentinel names the same primary: a primary whose replica was just promoted
/// keeps the others, and writes they alone acknowledge are lost when they follow the new
/// primary. It is counted afresh for a new primary (which may have no replica yet), and after
/// a failover waited out in vain (a replica gone for good).
pub(super) struct Sentinels {
    sentinels: Vec<ConnectionInfo>,
    master: String,
    node: redis::RedisConnectionInfo,
    /// The primary the store last reached, and how many replicas it had then (at most).
    primary_seen: Mutex<Option<(String, u16)>>,
    acks: AtomicU32,
}

impl Target {
    /// Whether a primary can change under the store (a failover), so that a failed command
    /// is worth retrying on the new one for a moment before the store is called unavailable.
    pub(super) fn fails_over(&self) -> bool {
        !matches!(self, Target::One(_))
    }

    /// How many replicas must acknowledge a write before it counts (see `Inner::replicated`):
    /// under Sentinel, every replica the primary had when the store first reached it; else none.
    /// A cluster's WAIT would ask every primary, and CLUSTER FAILOVER hands over only once the
    /// replica has caught up.
    pub(super) fn acks(&self) -> u32 {
        match self {
            Target::Sentinel(s) => s.acks.load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Takes the primary's replicas as they are at the next connection: after a failover
    /// waited out in vain, a replica that is gone for good must not stop every write.
    pub(super) fn recount_replicas(&self) {
        if let Target::Sentinel(s) = self {
            *s.primary_seen.lock() = None;
        }
    }

    pub(super) fn connect(&self, connect: Duration, io: Duration) -> RedisResult<Con> {
        match self {
            Target::One(client) => node_connection(client, connect, io).map(Con::One),
            Target::Sentinel(s) => s.primary(connect, io).map(Con::One),
            Target::Cluster(client) => client.get_connection().map(|c| Con::Cluster(Box::new(c))),
        }
    }
}

fn node_connection(client: &redis::Client, connect: Duration, io: Duration) -> RedisResult<Connection> {
    let con = client.get_connection_with_timeout(connect)?;
    con.set_read_timeout(Some(io))?;
    con.set_write_timeout(Some(io))?;
    Ok(con)
}

/// An error that counts as the server being out of reach (`RedisError::is_io_error`).
fn unreachable(why: String) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, why))
}

impl Sentinels {
    /// Asks each Sentinel in turn where the primary is, and connects there, checking that the
    /// server is a primary indeed (a Sentinel may not have seen a failover yet).
    fn primary(&self, connect: Duration, io: Duration) -> RedisResult<Connection> {
        let mut last = unreachable(format!("no Sentinel answered for master {:?}", self.master));
        for sentinel in &self.sentinels {
            match self.ask(sentinel, connect, io).and_then(|addr| self.connect_primary(addr, connect, io)) {
                Ok(con) => return Ok(con),
                // A Sentinel that turns the store away (a wrong Sentinel password) is reported
                // as such: the store refuses a client the servers refuse.
                Err(e) if super::turned_away(&e) => return Err(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn ask(&self, sentinel: &ConnectionInfo, connect: Duration, io: Duration) -> RedisResult<(String, u16)> {
        let client = redis::Client::open(sentinel.clone())?;
        let mut con = node_connection(&client, connect, io)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.master).query(&mut con)?;
        addr.ok_or_else(|| unreachable(format!("the Sentinel knows no master named {:?}", self.master)))
    }

    fn connect_primary(&self, (host, port): (String, u16), connect: Duration, io: Duration) -> RedisResult<Connection> {
        let info = ConnectionAddr::Tcp(host.clone(), port)
            .into_connection_info()?
            .set_redis_settings(self.node.clone())
            .set_tcp_settings(nodelay());
        let addr = (host, port);
        let mut con = node_connection(&redis::Client::open(info)?, connect, io)?;
        let role: Vec<Value> = redis::cmd("ROLE").query(&mut con)?;
        let replicas = match (role.first(), role.get(2)) {
            (Some(Value::BulkString(r)), Some(Value::Array(replicas))) if r == b"master" => replicas.len() as u32,
            _ => return Err(unreachable("the server the Sentinel named is not a primary (yet)".to_owned())),
        };
        let mut seen = self.primary_seen.lock();
        if seen.as_ref() == Some(&addr) {
            self.acks.fetch_max(replicas, Ordering::Relaxed);
        } else {
            *seen = Some(addr);
            self.acks.store(replicas, Ordering::Relaxed);
        }
        Ok(con)
    }
}

/// TCP_NODELAY: commands are small and each one is waited on; Nagle's algorithm would hold a
/// write behind an unacknowledged one.
pub(super) fn nodelay() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// A `redis+sentinel://` or `redis+cluster://` URL taken apart: `url` parses one host only.
struct Multi {
    scheme: &'static str,
    user: String,
    password: Option<String>,
    hosts: Vec<(String, u16)>,
    path: Vec<String>,
    query: Vec<(String, String)>,
    /// The passwords as typed (percent-encoded, say), for scrubbing.
    typed: Vec<String>,
}

/// What `open` needs of a URL: how to reach the server, the URL as shown (secrets masked) and
/// the secrets to scrub from any error text.
pub(super) struct Opened {
    pub(super) target: Target,
    pub(super) shown: String,
    pub(super) secrets: Vec<String>,
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

fn parse_multi(url: &str, scheme: &'static str, default_port: u16) -> std::result::Result<Multi, String> {
    let rest = &url[scheme.len() + 3..];
    let (authority, tail) = rest.find(['/', '?']).map_or((rest, ""), |i| rest.split_at(i));
    let (userinfo, hosts) = authority.rsplit_once('@').map_or(("", authority), |(u, h)| (u, h));
    let mut typed = Vec::new();
    let (user, password) = match userinfo.split_once(':') {
        Some((u, p)) => {
            typed.push(p.to_owned());
            (decode(u), Some(decode(p)))
        }
        None => (decode(userinfo), None),
    };
    let mut parsed = Vec::new();
    for host in hosts.split(',') {
        let (name, port) = match host.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, p.parse::<u16>().map_err(|_| format!("{host:?} has no valid port"))?),
            _ => (host, default_port),
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name.is_empty() {
            return Err("every host must be named (host:port, separated by commas)".to_owned());
        }
        parsed.push((name.to_owned(), port));
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    typed.extend(query.split('&').filter_map(|kv| kv.strip_prefix("password=")).map(str::to_owned));
    Ok(Multi {
        scheme,
        user,
        password,
        hosts: parsed,
        path: path.split('/').filter(|s| !s.is_empty()).map(decode).collect(),
        query: url::form_urlencoded::parse(query.as_bytes()).into_owned().collect(),
        typed,
    })
}

impl Multi {
    fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self.password.iter().cloned().collect();
        s.extend(self.query.iter().filter(|(k, _)| k == "password").map(|(_, v)| v.clone()));
        // Also as typed (percent-encoded, say): the raw URL could be quoted somewhere.
        s.extend(self.typed.iter().cloned());
        s
    }

    /// The URL with every password masked.
    fn shown(&self) -> String {
        let auth = match &self.password {
            Some(_) => format!("{}:{MASK}@", self.user),
            None if !self.user.is_empty() => format!("{}@", self.user),
            None => String::new(),
        };
        let hosts: Vec<String> =
            self.hosts.iter().map(|(h, p)| if h.contains(':') { format!("[{h}]:{p}") } else { format!("{h}:{p}") }).collect();
        let mut out = format!("{}://{auth}{}", self.scheme, hosts.join(","));
        for seg in &self.path {
            out.push('/');
            out.push_str(seg);
        }
        let query: Vec<String> =
            self.query.iter().map(|(k, v)| if k == "password" { format!("{k}={MASK}") } else { format!("{k}={v}") }).collect();
        if !query.is_empty() {
            out.push('?');
            out.push_str(&query.join("&"));
        }
        out
    }
}

/// Opens a `redis+sentinel://` or `redis+cluster://` URL (anything else goes to the crate).
pub(super) fn open_multi(url: &str, scheme: &str) -> Result<Opened> {
    let sentinel = scheme == "redis+sentinel";
    let (name, port) = if sentinel { ("redis+sentinel", 26379) } else { ("redis+cluster", 6379) };
    let m = parse_multi(url, name, port);
    let bad = |why: String, shown: &str| Error::BadInput(format!("store {shown}: {why}"));
    let m = match m {
        Ok(m) => m,
        Err(why) => return Err(bad(why, &crate::mask::mask_raw(url))),
    };
    let shown = m.shown();
    let secrets = m.secrets();
    let scrubbed = |e: RedisError| bad(scrub(&e.to_string(), &secrets), &shown);
    let target = if sentinel {
        let usage = "use redis+sentinel://[:SENTINEL_PASSWORD@]HOST:PORT,HOST:PORT/MASTER_NAME[/DB][?password=DATA_PASSWORD]";
        let (master, db) = match m.path.as_slice() {
            [master] => (master.clone(), 0),
            [master, db] => {
                (master.clone(), db.parse::<i64>().map_err(|_| bad(format!("database {db:?} is not a number; {usage}"), &shown))?)
            }
            _ => return Err(bad(format!("name the master (one path segment, then an optional database); {usage}"), &shown)),
        };
        if let Some((k, _)) = m.query.iter().find(|(k, _)| !matches!(k.as_str(), "password" | "username")) {
            return Err(bad(format!("unknown parameter {k:?}: only password and username (of the data nodes) are read"), &shown));
        }
        let mut node = redis::RedisConnectionInfo::default().set_db(db);
        for (k, v) in &m.query {
            node = if k == "password" { node.set_password(v) } else { node.set_username(v) };
        }
        let mut sentinels = Vec::new();
        for (host, port) in &m.hosts {
            let mut auth = redis::RedisConnectionInfo::default();
            if let Some(pw) = &m.password {
                auth = auth.set_password(pw);
            }
            if !m.user.is_empty() {
                auth = auth.set_username(&m.user);
            }
            let info = ConnectionAddr::Tcp(host.clone(), *port).into_connection_info().map_err(scrubbed)?;
            sentinels.push(info.set_redis_settings(auth).set_tcp_settings(nodelay()));
        }
        Target::Sentinel(Sentinels { sentinels, master, node, primary_seen: Mutex::new(None), acks: AtomicU32::new(0) })
    } else {
        if !m.path.is_empty() || !m.query.is_empty() {
            return Err(bad(
                "a cluster has one database and takes no parameters: use redis+cluster://[:PASSWORD@]HOST:PORT,HOST:PORT".to_owned(),
                &shown,
            ));
        }
        let nodes: Vec<ConnectionInfo> = m
            .hosts
            .iter()
            .map(|(h, p)| ConnectionAddr::Tcp(h.clone(), *p).into_connection_info())
            .collect::<RedisResult<_>>()
            .map_err(scrubbed)?;
        let mut b = ClusterClientBuilder::new(nodes)
            .connection_timeout(super::CONNECT_TIMEOUT)
            .response_timeout(super::IO_TIMEOUT)
            .tcp_settings(nodelay())
            // MOVED and ASK are followed within these; a longer outage is the store's to wait out.
            .retries(CLUSTER_RETRIES);
        if let Some(pw) = &m.password {
            b = b.password(pw.clone());
        }
        if !m.user.is_empty() {
            b = b.username(m.user.clone());
        }
        Target::Cluster(b.build().map_err(scrubbed)?)
    };
    Ok(Opened { target, shown, secrets })
}

/// How many redirections and retries the cluster client makes within one command.
const CLUSTER_RETRIES: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_and_kept_for_scrubbing_decoded_and_as_typed() {
        let url = "redis+sentinel://:s%40p%3Aw@h1:1,[::1]:2,h3/fleet/2?password=d%2Fp%26w&username=app";
        let o = open_multi(url, "redis+sentinel").unwrap();
        assert_eq!(o.shown, format!("redis+sentinel://:{MASK}@h1:1,[::1]:2,h3:26379/fleet/2?password={MASK}&username=app"));
        for secret in ["s@p:w", "s%40p%3Aw", "d/p&w", "d%2Fp%26w"] {
            assert!(o.secrets.iter().any(|s| s == secret), "{secret} not kept for scrubbing");
        }
        let Target::Sentinel(s) = o.target else { panic!("not a Sentinel target") };
        assert_eq!((s.master.as_str(), s.node.db(), s.node.password(), s.node.username()), ("fleet", 2, Some("d/p&w"), Some("app")));
        assert_eq!(s.sentinels.len(), 3);
        assert_eq!(s.sentinels[0].redis_settings().password(), Some("s@p:w"));
    }

    #[test]
    fn a_cluster_url_lists_its_nodes_and_one_password() {
        let o = open_multi("redis+cluster://:pw@a:7000,b", "redis+cluster").unwrap();
        assert_eq!(o.shown, format!("redis+cluster://:{MASK}@a:7000,b:6379"));
        assert!(matches!(o.target, Target::Cluster(_)));
    }

    #[test]
    fn bad_urls_say_what_is_wrong_without_the_password() {
        for (url, why) in [
            ("redis+sentinel://:pw1@h:1", "name the master"),
            ("redis+sentinel://:pw1@h:1/m/x", "not a number"),
            ("redis+sentinel://:pw1@h:1/m/0/extra", "name the master"),
            ("redis+sentinel://:pw1@h:1/m?db=1", "unknown parameter"),
            ("redis+sentinel://:pw1@h:x/m", "no valid port"),
            ("redis+sentinel://:pw1@,h/m", "every host must be named"),
            ("redis+cluster://:pw1@h/0", "takes no parameters"),
        ] {
            let scheme = url.split_once("://").unwrap().0;
            let Err(Error::BadInput(msg)) = open_multi(url, scheme) else { panic!("{url} accepted") };
            assert!(msg.contains(why), "{url}: {msg}");
            assert!(!msg.contains("pw1"), "{url}: {msg}");
        }
    }
}
