//! The background task that gives back what a process holds when idle and
//! renews its leases.

use std::future::Future;
use std::time::{Duration, Instant};

/// What a process holds per organization (slot blocks, allowances) and
/// must give back when idle and renew while it lives.
pub(super) trait Housekeeping: Send + Sync + 'static {
    fn give_back_idle(&self) -> impl Future<Output = ()> + Send;
    fn renew(&self) -> impl Future<Output = ()> + Send;
}

/// Gives back what was idle every quarter of `idle` (at least every 10 ms)
/// and renews the leases every third of `lease`; abort it at shutdown.
pub(super) fn spawn_housekeeping(
    held: impl Housekeeping,
    idle: Duration,
    lease: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let tick = (idle / 4).max(Duration::from_millis(10));
        let renew_every = lease / 3;
        let mut renewed = Instant::now();
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            held.give_back_idle().await;
            if renewed.elapsed() >= renew_every {
                held.renew().await;
                renewed = Instant::now();
            }
        }
    })
}
