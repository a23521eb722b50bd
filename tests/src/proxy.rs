//! A Unix socket relay between a client and the daemon whose connections a
//! test can cut, as a restarted proxy or a dropped network path would.
use std::io::copy;
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Relays each connection to its socket to the daemon's socket.
pub struct Relay {
    path: PathBuf,
    open: Arc<Mutex<Vec<UnixStream>>>,
}

impl Relay {
    /// Listens on a fresh socket and relays what it accepts to `daemon`.
    pub fn start(daemon: &Path) -> Relay {
        let path = crate::unique_dir("relay").join("relay.sock");
        let listener = UnixListener::bind(&path).expect("bind the relay socket");
        let open = Arc::new(Mutex::new(Vec::new()));
        let (daemon, kept) = (daemon.to_path_buf(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = UnixStream::connect(&daemon) else {
                    continue;
                };
                let pipe = |mut from: UnixStream, mut to: UnixStream| {
                    std::thread::spawn(move || {
                        let _ = copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Write);
                    });
                };
                let ends = [&client, &server].map(|s| s.try_clone().expect("clone a stream"));
                pipe(
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                pipe(server, client);
                kept.lock().unwrap().extend(ends);
            }
        });
        Relay { path, open }
    }

    /// The socket clients connect to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes every connection relayed so far, both ways; later ones are
    /// relayed again.
    pub fn cut(&self) -> usize {
        let cut: Vec<UnixStream> = self.open.lock().unwrap().drain(..).collect();
        for s in &cut {
            let _ = s.shutdown(Shutdown::Both);
        }
        cut.len() / 2
    }
}
