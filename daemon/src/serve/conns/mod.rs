//! Connections before and between calls: what each listener admits (a cap,
//! a cap per peer, a share for connections no call has authenticated yet,
//! a reserve for root on the Unix socket), a connection's state (calls
//! open, authenticated or not), the HTTP/2 keepalive, and the counts of
//! what was refused for `/metrics`. The deadlines of a connection's bytes
//! (handshake, first call, idle) are in [`guard`], the counting of its
//! calls in [`calls`]. Who a caller is stays `auth`'s business; the TLS
//! handshake, `tls_listener`'s.
mod calls;
mod guard;

pub use calls::{CallsLayer, Connection};
pub use guard::Guarded;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::net::{UnixListener, UnixStream};
use tokio::time::{Instant, Sleep};

/// Connections root may open on the Unix socket beyond `max_connections`.
pub const ROOT_RESERVE: usize = 8;
/// Bounds of the default `max_connections`: a quarter of the open-files limit.
const DEFAULT_MAX: (usize, usize) = (16, 4096);
/// HTTP/2 keepalive: a ping after this long (or a third of the idle
/// timeout) without a frame from the client.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long accepting pauses after it failed (out of descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The connection settings (`[limits]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Connections each listener holds at once; None: a quarter of the
    /// open-files limit, from 16 to 4096.
    pub max_connections: Option<usize>,
    /// Connections one peer holds on a listener at once (a uid on the Unix
    /// socket, root excepted; an address on the TLS listener); None: a
    /// quarter of `max_connections`.
    pub max_per_peer: Option<usize>,
    /// Connections of the TLS listener that have not made a call with a
    /// valid token yet; None: half of `max_connections`.
    pub max_unauthenticated: Option<usize>,
    /// How long a new connection has to finish its TLS handshake and send
    /// the HTTP/2 preface (or the start of an HTTP/1.1 request).
    pub handshake_timeout: Duration,
    /// How long a connection has, once its handshake is done, to make its
    /// first call (on the TLS listener, one with a valid token).
    pub first_request_timeout: Duration,
    /// A connection with no call open for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: None,
            max_per_peer: None,
            max_unauthenticated: None,
            handshake_timeout: Duration::from_secs(10),
            first_request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

impl Limits {
    /// `max_connections`, or the default from this process's open-files
    /// limit: the two listeners together take at most half of it.
    pub fn max_connections(&self) -> usize {
        self.max_connections.unwrap_or_else(|| {
            let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .unwrap_or(u64::MAX);
            let quarter = usize::try_from(nofile / 4).unwrap_or(usize::MAX);
            quarter.clamp(DEFAULT_MAX.0, DEFAULT_MAX.1)
        })
    }

    /// `max_per_peer`, or a quarter of `max_connections`; at most that.
    pub fn max_per_peer(&self) -> usize {
        let max = self.max_connections();
        self.max_per_peer.unwrap_or(max / 4).clamp(1, max)
    }

    /// `max_unauthenticated`, or half of `max_connections`; at most that.
    pub fn max_unauthenticated(&self) -> usize {
        let max = self.max_connections();
        self.max_unauthenticated.unwrap_or(max / 2).clamp(1, max)
    }

    /// The HTTP/2 keepalive interval and ping timeout: a client that answers
    /// pings is not closed for them (its connection closes when it has no
    /// call open for the idle timeout), and one that does not is closed
    /// once the ping times out.
    pub fn keepalive(&self) -> (Duration, Duration) {
        let interval = KEEPALIVE_INTERVAL.min(self.idle_timeout / 3);
        (interval, self.idle_timeout + interval)
    }
}

/// Who a connection comes from, for the cap per peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// The uid the kernel gives for a Unix socket peer.
    Uid(u32),
    /// The address of a TCP peer (IPv4-mapped IPv6 addresses as IPv4).
    Addr(IpAddr),
}

impl Peer {
    pub fn of_addr(addr: SocketAddr) -> Peer {
        Peer::Addr(addr.ip().to_canonical())
    }
}

/// Why a connection was closed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The listener holds `max_connections`.
    Limit,
    /// Its peer holds `max_connections_per_peer`.
    PerPeer,
    /// The TLS listener holds `max_unauthenticated_connections` that have
    /// made no call with a valid token.
    Unauthenticated,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::Limit => "the listener is full",
            Refused::PerPeer => "its peer holds its share",
            Refused::Unauthenticated => "unauthenticated connections hold their share",
        })
    }
}

/// What one listener holds and refused.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections open now (handshakes included).
    pub open: AtomicU64,
    /// Of those, connections no call has authenticated yet.
    pub unauthenticated: AtomicU64,
    /// Connections closed at once: the listener was full.
    pub refused_limit: AtomicU64,
    /// Connections closed at once: their peer held its share.
    pub refused_per_peer: AtomicU64,
    /// Connections closed at once: unauthenticated ones held their share.
    pub refused_unauthenticated: AtomicU64,
    /// Connections closed because their handshake or preface was late.
    pub handshake_timeouts: AtomicU64,
    /// Connections closed because their first (authenticated) call was late.
    pub first_request_timeouts: AtomicU64,
    /// Connections closed because they had no call open for the idle timeout.
    pub idle_timeouts: AtomicU64,
}

impl ListenerStats {
    fn count(&self, refused: Refused) {
        let counter = match refused {
            Refused::Limit => &self.refused_limit,
            Refused::PerPeer => &self.refused_per_peer,
            Refused::Unauthenticated => &self.refused_unauthenticated,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Both listeners' counts.
#[derive(Debug, Default)]
pub struct Stats {
    pub unix: Arc<ListenerStats>,
    pub tls: Arc<ListenerStats>,
}

/// The calls of one connection: how many are open, and when the last one
/// started or ended.
#[derive(Debug)]
struct CallState {
    open: u64,
    last: Instant,
}

/// One connection's state, shared by its guard, its calls and its slot.
#[derive(Debug)]
pub struct Conn {
    stats: Arc<ListenerStats>,
    /// The kernel names the peer (the Unix socket): any call authenticates.
    peer_known: bool,
    authenticated: AtomicBool,
    calls: Mutex<CallState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Conn {
    fn new(stats: Arc<ListenerStats>, peer_known: bool) -> Conn {
        Conn {
            stats,
            peer_known,
            authenticated: AtomicBool::new(false),
            calls: Mutex::new(CallState {
                open: 0,
                last: Instant::now(),
            }),
        }
    }

    /// A call authenticated the connection: it leaves the unauthenticated
    /// share (once).
    fn authenticate(&self) {
        if !self.authenticated.swap(true, Ordering::AcqRel) {
            self.stats.unauthenticated.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }

    fn call_started(&self) {
        {
            let mut c = lock(&self.calls);
            c.open += 1;
            c.last = Instant::now();
        }
        if self.peer_known {
            self.authenticate();
        }
    }

    fn call_ended(&self) {
        let mut c = lock(&self.calls);
        c.open -= 1;
        c.last = Instant::now();
    }

    /// Since when no call has been open; None while one is.
    fn idle_since(&self) -> Option<Instant> {
        let c = lock(&self.calls);
        (c.open == 0).then_some(c.last)
    }
}

/// What a listener admits, and the peers holding its connections.
#[derive(Debug)]
struct Admission {
    stats: Arc<ListenerStats>,
    max: usize,
    per_peer: usize,
    /// The share of connections not yet authenticated; None on the Unix
    /// socket, whose peers the kernel names.
    unauthenticated: Option<usize>,
    peers: Mutex<HashMap<Peer, usize>>,
}

impl Admission {
    /// Root on the Unix socket: beyond the cap per peer, with a reserve.
    fn is_root(&self, peer: Peer) -> bool {
        self.unauthenticated.is_none() && peer == Peer::Uid(0)
    }
}

/// The deadlines of a listener's connections.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    handshake: Duration,
    first_request: Duration,
    idle: Duration,
}

/// Admits a listener's connections and guards them.
#[derive(Debug, Clone)]
pub struct Gate {
    admission: Arc<Admission>,
    timeouts: Timeouts,
}

/// One admitted connection's place in its listener's counts.
#[derive(Debug)]
pub struct Slot {
    conn: Arc<Conn>,
    admission: Arc<Admission>,
    peer: Peer,
    accepted: Instant,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let a = &self.admission;
        let mut peers = lock(&a.peers);
        if let Some(held) = peers.get_mut(&self.peer) {
            *held -= 1;
            if *held == 0 {
                peers.remove(&self.peer);
            }
        }
        a.stats.open.fetch_sub(1, Ordering::Relaxed);
        drop(peers);
        // Closed before any call authenticated it: out of that share too.
        self.conn.authenticate();
    }
}

impl Gate {
    fn new(limits: &Limits, stats: Arc<ListenerStats>, unauthenticated: Option<usize>) -> Gate {
        Gate {
            admission: Arc::new(Admission {
                stats,
                max: limits.max_connections(),
                per_peer: limits.max_per_peer(),
                unauthenticated,
                peers: Mutex::default(),
            }),
            timeouts: Timeouts {
                handshake: limits.handshake_timeout,
                first_request: limits.first_request_timeout,
                idle: limits.idle_timeout,
            },
        }
    }

    /// The Unix socket's gate: the cap per uid (root excepted, and root may
    /// open [`ROOT_RESERVE`] beyond the listener's cap); any call
    /// authenticates a connection.
    pub fn unix(limits: &Limits, stats: Arc<ListenerStats>) -> Gate {
        Gate::new(limits, stats, None)
    }

    /// The TLS listener's gate: the cap per address, and the share of
    /// connections that have not made a call with a valid token yet.
    pub fn tls(limits: &Limits, stats: Arc<ListenerStats>) -> Gate {
        Gate::new(limits, stats, Some(limits.max_unauthenticated()))
    }

    /// Turn on TCP keepalive for a TCP connection just accepted: a peer
    /// gone without a word (a host switched off, a dropped route), which
    /// HTTP/2 pings cannot reach during a TLS handshake, is found by the
    /// kernel within two keepalive intervals of its last byte.
    pub fn keep_alive(&self, stream: impl std::os::fd::AsFd) -> io::Result<()> {
        use rustix::net::sockopt;
        let idle = KEEPALIVE_INTERVAL
            .min(self.timeouts.idle / 3)
            .max(Duration::from_secs(1));
        sockopt::set_tcp_keepidle(&stream, idle)?;
        sockopt::set_tcp_keepintvl(&stream, (idle / 3).max(Duration::from_secs(1)))?;
        sockopt::set_tcp_keepcnt(&stream, 3)?;
        Ok(sockopt::set_socket_keepalive(&stream, true)?)
    }

    /// A place for a connection of `peer` just accepted, or why not
    /// (counted): the caller closes it at once.
    pub fn admit(&self, peer: Peer) -> Result<Slot, Refused> {
        let a = &self.admission;
        let root = a.is_root(peer);
        let mut peers = lock(&a.peers);
        let held = peers.get(&peer).copied().unwrap_or(0);
        let open = a.stats.open.load(Ordering::Relaxed) as usize;
        let pending = a.stats.unauthenticated.load(Ordering::Relaxed) as usize;
        let refused = if !root && held >= a.per_peer {
            Some(Refused::PerPeer)
        } else if open >= a.max + if root { ROOT_RESERVE } else { 0 } {
            Some(Refused::Limit)
        } else if a.unauthenticated.is_some_and(|share| pending >= share) {
            Some(Refused::Unauthenticated)
        } else {
            None
        };
        if let Some(refused) = refused {
            drop(peers);
            a.stats.count(refused);
            return Err(refused);
        }
        *peers.entry(peer).or_default() += 1;
        a.stats.open.fetch_add(1, Ordering::Relaxed);
        a.stats.unauthenticated.fetch_add(1, Ordering::Relaxed);
        drop(peers);
        Ok(Slot {
            conn: Arc::new(Conn::new(a.stats.clone(), a.unauthenticated.is_none())),
            admission: a.clone(),
            peer,
            accepted: Instant::now(),
        })
    }

    /// When the handshake of a connection admitted as `slot` must be done.
    pub fn handshake_deadline(&self, slot: &Slot) -> Instant {
        slot.accepted + self.timeouts.handshake
    }

    /// Count a connection whose (TLS) handshake was late.
    pub fn handshake_timed_out(&self) {
        self.admission
            .stats
            .handshake_timeouts
            .fetch_add(1, Ordering::Relaxed);
    }

    /// `io`, closed when its preface or first call is late, or when it has
    /// no call open for the idle timeout.
    pub fn guard<IO>(&self, io: IO, slot: Slot) -> Guarded<IO> {
        let deadline = self.handshake_deadline(&slot);
        Guarded::new(io, slot, deadline, self.timeouts)
    }
}

/// The Unix socket's connections, admitted and guarded: a uid other than
/// root holds at most its share, and root may open [`ROOT_RESERVE`] beyond
/// the cap, so that other users and an administrator still get in when one
/// user fills it.
pub struct UnixIncoming {
    listener: UnixListener,
    gate: Gate,
    pause: Option<Pin<Box<Sleep>>>,
}

impl UnixIncoming {
    pub fn new(listener: UnixListener, gate: Gate) -> UnixIncoming {
        UnixIncoming {
            listener,
            gate,
            pause: None,
        }
    }
}

impl tokio_stream::Stream for UnixIncoming {
    type Item = io::Result<Guarded<UnixStream>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(pause) = &mut this.pause {
                ready!(pause.as_mut().poll(cx));
                this.pause = None;
            }
            let stream = match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::debug!(%err, "accept failed");
                    this.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE)));
                    continue;
                }
            };
            let uid = match stream.peer_cred() {
                Ok(cred) => cred.uid(),
                Err(err) => {
                    tracing::debug!(%err, "no peer credentials: connection closed");
                    continue;
                }
            };
            match this.gate.admit(Peer::Uid(uid)) {
                Ok(slot) => return Poll::Ready(Some(Ok(this.gate.guard(stream, slot)))),
                Err(why) => tracing::debug!(uid, %why, "Unix socket connection closed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> Limits {
        Limits {
            max_connections: Some(max),
            ..Limits::default()
        }
    }

    #[test]
    fn tcp_connections_are_kept_alive() {
        use rustix::net::sockopt;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        assert!(!sockopt::socket_keepalive(&stream).unwrap());
        let gate = Gate::tls(&Limits::default(), Arc::default());
        gate.keep_alive(&stream).unwrap();
        assert!(sockopt::socket_keepalive(&stream).unwrap());
        assert_eq!(
            sockopt::tcp_keepidle(&stream).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            sockopt::tcp_keepintvl(&stream).unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sockopt::tcp_keepcnt(&stream).unwrap(), 3);
    }

    #[test]
    fn shares_default_to_fractions_of_the_cap() {
        let l = limits(64);
        assert_eq!((l.max_per_peer(), l.max_unauthenticated()), (16, 32));
        let l = Limits {
            max_per_peer: Some(100),
            max_unauthenticated: Some(0),
            ..limits(4)
        };
        assert_eq!((l.max_per_peer(), l.max_unauthenticated()), (4, 1));
    }

    #[test]
    fn each_uid_holds_its_share_and_root_its_reserve() {
        let stats = Arc::new(ListenerStats::default());
        let g = Gate::unix(&limits(8), stats.clone());
        let (alice, bob) = (Peer::Uid(1000), Peer::Uid(1001));
        let a: Vec<Slot> = (0..2).map(|_| g.admit(alice).unwrap()).collect();
        assert_eq!(g.admit(alice).unwrap_err(), Refused::PerPeer);
        let b: Vec<Slot> = (0..2).map(|_| g.admit(bob).unwrap()).collect();
        let others: Vec<Slot> = (2..6)
            .map(|u| g.admit(Peer::Uid(1000 + u)).unwrap())
            .collect();
        assert_eq!(g.admit(Peer::Uid(2000)).unwrap_err(), Refused::Limit);
        // Root is not held to a share and has its reserve beyond the cap.
        let root: Vec<Slot> = (0..ROOT_RESERVE)
            .map(|_| g.admit(Peer::Uid(0)).unwrap())
            .collect();
        assert_eq!(g.admit(Peer::Uid(0)).unwrap_err(), Refused::Limit);
        assert_eq!(stats.refused_per_peer.load(Ordering::Relaxed), 1);
        assert_eq!(stats.refused_limit.load(Ordering::Relaxed), 2);
        assert_eq!(stats.open.load(Ordering::Relaxed), 16);
        // Closing frees the place, and the peer's share.
        drop((a, root, others));
        assert_eq!(stats.open.load(Ordering::Relaxed), 2);
        assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 2);
        assert!(g.admit(alice).is_ok());
        drop(b);
        assert!(lock(&g.admission.peers).is_empty());
    }

    #[test]
    fn unauthenticated_tls_connections_hold_only_their_share() {
        let stats = Arc::new(ListenerStats::default());
        let g = Gate::tls(&limits(8), stats.clone());
        let peer = |n: u8| Peer::of_addr(SocketAddr::from(([10, 0, 0, n], 4000)));
        // Addresses are peers: an IPv4-mapped IPv6 address is its IPv4 one.
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:5000".parse().unwrap();
        assert_eq!(Peer::of_addr(mapped), peer(1));
        let pending: Vec<Slot> = (1..=4).map(|n| g.admit(peer(n)).unwrap()).collect();
        assert_eq!(g.admit(peer(5)).unwrap_err(), Refused::Unauthenticated);
        // A connection whose call brought a token leaves the share...
        pending[0].conn.authenticate();
        pending[0].conn.authenticate();
        assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 3);
        let more = g.admit(peer(5)).unwrap();
        more.conn.authenticate();
        // ...and the authenticated may fill the rest of the listener.
        let authed: Vec<Slot> = (6..=8)
            .map(|n| {
                let s = g.admit(peer(n)).unwrap();
                s.conn.authenticate();
                s
            })
            .collect();
        assert_eq!(g.admit(peer(9)).unwrap_err(), Refused::Limit);
        assert_eq!(stats.refused_unauthenticated.load(Ordering::Relaxed), 1);
        drop((pending, more, authed));
        assert_eq!(stats.open.load(Ordering::Relaxed), 0);
        assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 0);
    }
}
