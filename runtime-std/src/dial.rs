//! A TCP connect in two steps: start it and wait a first, short while on the
//! thread that asked (a loopback or LAN peer answers in that time), then — if
//! the peer has not answered yet — wait out the rest of the connect timeout
//! elsewhere ([`Pending::finish`], on a worker thread).
//!
//! A calling thread connects its own call's first route this way
//! ([`on_caller`]): the request then goes out from the thread that connected,
//! with no thread hand-over between the connect and the first write. Only
//! the first short wait happens there, so a waiting call keeps the core's
//! clock (the race's next attempt, the timeouts) while a slow connect goes on.

use std::cell::RefCell;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use switchyard_common::transport::TcpOptions;

/// How long a calling thread waits for its own call's first connect before
/// it hands the socket to a worker thread.
pub(crate) const FIRST_WAIT: Duration = Duration::from_millis(1);

/// A connect started.
pub(crate) enum Dial {
    /// Connected, or failed (refused, no route, a socket option refused).
    Done(io::Result<TcpStream>),
    /// The peer has not answered yet.
    Pending(Pending),
}

/// A connect in progress: the socket and the time it has left.
pub(crate) struct Pending {
    #[cfg_attr(not(unix), allow(dead_code))]
    socket: socket2::Socket,
    deadline: Instant,
}

/// Starts a connect to `addr` with the client's socket options and waits up
/// to `first` (at most `limit`, the connect timeout) for it.
pub(crate) fn start(options: &TcpOptions, addr: SocketAddr, limit: Duration, first: Duration) -> Dial {
    #[cfg(unix)]
    {
        let deadline = Instant::now() + limit;
        let socket = match options.socket(addr) {
            Ok(socket) => socket,
            Err(e) => return Dial::Done(Err(e)),
        };
        match begin(&socket, addr, first.min(limit)) {
            Ok(true) => Dial::Done(connected(socket)),
            Ok(false) => Dial::Pending(Pending { socket, deadline }),
            Err(e) => Dial::Done(Err(e)),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = first;
        Dial::Done(options.connect_timeout(addr, limit))
    }
}

/// Sends the SYN and waits up to `first`: whether the connect finished (an
/// error if it failed). Linux bounds a blocking connect by
/// the socket's send timeout (`socket(7)`: the connect goes on and reports
/// `EINPROGRESS`), which costs fewer system calls than a non-blocking
/// connect and a `poll`; the send timeout is granular to the kernel's tick.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn begin(socket: &socket2::Socket, addr: SocketAddr, first: Duration) -> io::Result<bool> {
    // Zero would mean "no timeout".
    socket.set_write_timeout(Some(first.max(Duration::from_micros(1))))?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(true),
        Err(e) if in_progress(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends the SYN and waits up to `first`: whether the connect finished.
#[cfg(all(unix, not(any(target_os = "linux", target_os = "android"))))]
fn begin(socket: &socket2::Socket, addr: SocketAddr, first: Duration) -> io::Result<bool> {
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(true),
        Err(e) if in_progress(&e) => {
            let done = wait(socket, first)?;
            match socket.take_error()? {
                Some(e) if done => Err(e),
                _ => Ok(done),
            }
        }
        Err(e) => Err(e),
    }
}

impl Pending {
    /// Waits for the rest of the connect timeout: connected, failed, or
    /// timed out (`TimedOut`, as a blocking connect with a timeout says).
    pub(crate) fn finish(self) -> io::Result<TcpStream> {
        #[cfg(unix)]
        {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if wait(&self.socket, left)? {
                if let Some(e) = self.socket.take_error()? {
                    return Err(e);
                }
                return connected(self.socket);
            }
        }
        Err(io::Error::new(io::ErrorKind::TimedOut, "connection timed out"))
    }
}

/// Whether the socket became writable (connected) or reported an error
/// within `wait`.
#[cfg(unix)]
fn wait(socket: &socket2::Socket, wait: Duration) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let timeout = Timespec::try_from(left).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut fds = [PollFd::new(socket, PollFlags::OUT)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) if left.is_zero() => return Ok(false),
            Ok(0) => {} // woken early: wait out the rest
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A connected socket: blocking, no receive timeout. On Linux its send
/// timeout is still the connect's bound: whatever writes next sets its own
/// (the proxy and TLS handshakes, HTTP/2's pump, and an HTTP/1.1 `Wire`,
/// which knows its write timeout only once it set one), so clearing it here
/// would be a system call per connection for nothing.
#[cfg(unix)]
fn connected(socket: socket2::Socket) -> io::Result<TcpStream> {
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    socket.set_nonblocking(false)?;
    Ok(socket.into())
}

/// A connect still under way (`EINPROGRESS`); not `EAGAIN`, which a
/// connect means as "no local port free".
#[cfg(unix)]
fn in_progress(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error())
}

/// A calling thread's first connect, held while it starts its call.
type Job = Box<dyn FnOnce(Duration) + Send>;

enum Slot {
    /// Not starting a call: connects go to worker threads.
    Closed,
    /// Starting a call, no connect yet.
    Open,
    /// The call's first connect, run by the thread once the call started.
    Holding(Job),
}

thread_local! {
    static SLOT: RefCell<Slot> = const { RefCell::new(Slot::Closed) };
}

/// Starts a call with `start` on this thread; the first connect the call's
/// start asks for ([`hold`]) runs here afterwards, waiting up to
/// [`FIRST_WAIT`], before the call waits for its connection.
pub(crate) fn on_caller<R>(start: impl FnOnce() -> R) -> R {
    SLOT.with(|s| *s.borrow_mut() = Slot::Open);
    let started = start();
    let held = SLOT.with(|s| std::mem::replace(&mut *s.borrow_mut(), Slot::Closed));
    if let Slot::Holding(job) = held {
        job(FIRST_WAIT);
    }
    started
}

/// Holds `job` for the calling thread when it is starting a call and holds
/// no connect yet; otherwise hands it back (to run elsewhere).
pub(crate) fn hold(job: Job) -> Result<(), Job> {
    SLOT.with(|s| {
        let mut slot = s.borrow_mut();
        match *slot {
            Slot::Open => {
                *slot = Slot::Holding(job);
                Ok(())
            }
            _ => Err(job),
        }
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_listening_peer_connects_within_the_first_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let Dial::Done(Ok(stream)) =
            start(&TcpOptions::default(), addr, Duration::from_secs(5), Duration::from_secs(1))
        else {
            panic!("a loopback connect to a listener did not finish");
        };
        assert_eq!(stream.peer_addr().unwrap(), addr);
        assert!(stream.nodelay().unwrap(), "TCP_NODELAY is on");
        // What `Timeouts::fresh` assumes: no receive timeout; on Linux the
        // send timeout is still the connect's first wait, for the next writer
        // to replace.
        assert_eq!(stream.read_timeout().unwrap(), None, "no receive timeout");
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(stream.write_timeout().unwrap(), Some(Duration::from_secs(1)), "the connect's bound");
        // Blocking again: a read waits (bounded here) instead of failing at once.
        stream.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let err = std::io::Read::read(&mut &stream, &mut [0u8; 1]).unwrap_err();
        assert!(matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{err}");
    }

    #[test]
    fn a_closed_port_fails_with_its_error() {
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let failed = match start(&TcpOptions::default(), addr, Duration::from_secs(5), Duration::from_secs(1))
        {
            Dial::Done(r) => r,
            Dial::Pending(p) => p.finish(),
        };
        assert_eq!(failed.unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_full_backlog_times_out_after_the_limit() {
        // A listener with a full accept backlog that never accepts: further
        // SYNs are dropped, so a connect hangs (TOOLING.md's dead route).
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
        socket.listen(0).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        let mut held = Vec::new();
        let mut pending = None;
        for _ in 0..16 {
            match start(&TcpOptions::default(), addr, Duration::from_millis(300), Duration::ZERO) {
                Dial::Done(Ok(s)) => held.push(s),
                Dial::Done(Err(e)) => panic!("connect failed instead of hanging: {e}"),
                Dial::Pending(p) => {
                    pending = Some(p);
                    break;
                }
            }
        }
        let pending = pending.expect("the backlog never filled");
        let err = pending.finish().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    }

    #[test]
    fn a_connect_finished_elsewhere_is_a_plain_blocking_socket() {
        // The backlog frees once the listener accepts: the SYN the kernel
        // sends again (after about a second) gets through.
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
        socket.listen(0).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        let listener: TcpListener = socket.into();
        let mut held = Vec::new();
        let pending = loop {
            match start(&TcpOptions::default(), addr, Duration::from_secs(10), Duration::ZERO) {
                Dial::Done(Ok(s)) => held.push(s),
                Dial::Done(Err(e)) => panic!("connect failed instead of waiting: {e}"),
                Dial::Pending(p) => break p,
            }
            assert!(held.len() < 16, "the backlog never filled");
        };
        let accepting = std::thread::spawn(move || {
            let mut peers = Vec::new();
            for _ in 0..=held.len() {
                peers.push(listener.accept().unwrap().0);
            }
            peers
        });
        let stream = pending.finish().expect("connected once the backlog freed");
        assert_eq!(stream.peer_addr().unwrap(), addr);
        // What `Timeouts::fresh` assumes: no receive timeout; on Linux the
        // send timeout is still the connect's first wait, for the next writer
        // to replace.
        assert_eq!(stream.read_timeout().unwrap(), None, "no receive timeout");
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert!(stream.write_timeout().unwrap().is_some(), "the connect's bound");
        let mut peers = accepting.join().unwrap();
        std::io::Write::write_all(&mut &stream, b"ping").unwrap();
        let mut got = [0u8; 4];
        std::io::Read::read_exact(peers.last_mut().unwrap(), &mut got).unwrap();
        assert_eq!(&got, b"ping");
    }

    #[test]
    fn only_the_first_connect_of_a_starting_call_is_held() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        assert!(hold(Box::new(|_| {})).is_err(), "no call starting: nothing held");
        let ran = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&ran);
        let out = on_caller(|| {
            let first = hold(Box::new(move |wait| {
                assert_eq!(wait, FIRST_WAIT);
                r.fetch_add(1, Ordering::SeqCst);
            }));
            assert!(first.is_ok());
            assert!(hold(Box::new(|_| {})).is_err(), "a second connect goes elsewhere");
            assert_eq!(ran.load(Ordering::SeqCst), 0, "held until the call started");
            7
        });
        assert_eq!(out, 7);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(hold(Box::new(|_| {})).is_err(), "closed again after the call started");
    }
}
