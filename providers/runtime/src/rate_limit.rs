//! Client-side rate limit of a manager's management-cluster client (`--kube-api-qps`,
//! `--kube-api-burst`), as client-go's token bucket: `burst` requests at once, then `qps` per second.
//! A request over the limit waits for its turn; none is refused. A watch counts once, when it starts.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Requests per second and how many may go at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub qps: f64,
    pub burst: u32,
}

impl Limit {
    /// No limit when `qps` is zero (or less).
    pub fn unlimited(&self) -> bool {
        self.qps <= 0.0
    }
}

/// A token bucket that hands out reservations: each request takes a token now, or the time until its
/// token will be there.
#[derive(Debug)]
struct Bucket {
    limit: Limit,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(limit: Limit, now: Instant) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.burst.max(1)),
            at: now,
        }
    }

    /// Takes one token; returns how long the request must wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let burst = f64::from(self.limit.burst.max(1));
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.limit.qps;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now.max(self.at);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.limit.qps)
        }
    }
}

/// A client that behaves like `client` and sends at most as fast as `limit` allows (unchanged when
/// the limit is off).
pub fn limited(client: &kube::Client, limit: Limit) -> kube::Client {
    if limit.unlimited() {
        return client.clone();
    }
    let bucket = Mutex::new(Bucket::new(limit, Instant::now()));
    crate::before_send::before_send(client, move |_| {
        bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reserve(Instant::now())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_then_qps_per_second() {
        let start = Instant::now();
        let mut bucket = Bucket::new(
            Limit {
                qps: 10.0,
                burst: 3,
            },
            start,
        );
        let waits: Vec<Duration> = (0..5).map(|_| bucket.reserve(start)).collect();
        assert_eq!(waits[..3], [Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(100));
        assert_eq!(waits[4], Duration::from_millis(200));
        // A second later the debt is paid and 7 tokens were earned, but the bucket holds only 3.
        let later = start + Duration::from_secs(1);
        let waits: Vec<Duration> = (0..4).map(|_| bucket.reserve(later)).collect();
        assert_eq!(waits[..3], [Duration::ZERO; 3]);
        assert_eq!(waits[3], Duration::from_millis(100));
    }

    #[test]
    fn zero_qps_is_no_limit() {
        assert!(Limit { qps: 0.0, burst: 1 }.unlimited());
        assert!(!Limit { qps: 0.5, burst: 1 }.unlimited());
    }

    #[tokio::test]
    async fn requests_over_the_limit_wait_their_turn() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = limited(
            &kube::Client::try_from(config).unwrap(),
            Limit {
                qps: 20.0,
                burst: 1,
            },
        );
        let start = Instant::now();
        for _ in 0..3 {
            // Nothing listens on port 9: each request fails, after its turn.
            assert!(client.apiserver_version().await.is_err());
        }
        let waited = Instant::now() - start;
        // The second and the third waited 50 ms each for their tokens.
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    }
}
