//! Free TCP ports on loopback.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

use crate::Error;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port that was free a moment ago and has not been handed out by this process before.
/// Another process may still take it; starters retry when a bind fails.
pub fn free_port() -> Result<u16, Error> {
    for _ in 0..64 {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Error::io("bind 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("read local address", e))?
            .port();
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
    Err(Error::Other(
        "no free port found on 127.0.0.1 after 64 tries".into(),
    ))
}
