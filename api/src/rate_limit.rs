//! The plan's request rate, per organization (every key of it together),
//! across every API process.
//!
//! The limit lives in PostgreSQL (`rate_limits`, a cell rate algorithm).
//! Keys with a high rate take tokens in blocks of a tenth of a second's
//! worth and admit requests from the block in memory; a block unused after
//! a second is dropped (its tokens are spent, never re-granted), so the plan's
//! rate holds exactly and a process never admits more than it took. Keys
//! with a rate under 1,200 per minute take one token per request, as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use unigen_db::queries::limits;

use unigen_db::queries::limits::{RateGrant, RateState};
use unigen_db::{DbError, PgPool};
use uuid::Uuid;

/// How long a block's tokens may be used.
const BLOCK_LIFETIME: Duration = Duration::from_secs(1);
/// Largest block, whatever the rate.
const MAX_BLOCK: u32 = 1_000;
/// Expired blocks are swept once the map holds this many.
const SWEEP_AT: usize = 10_000;

struct Block {
    left: u32,
    expires: Instant,
    per_minute: i32,
    /// The key's state when the block was taken.
    state: Option<RateState>,
}

/// Where a key stands after a request was admitted or refused: OpenAI's
/// `x-ratelimit-*-requests` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    /// Requests per minute.
    pub limit: u32,
    /// Requests the key may still make at once (tokens this process holds
    /// in its block included).
    pub remaining: u32,
    /// Until the whole burst is available again.
    pub reset: Duration,
}

/// What [`RateLimiter::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admitted(RateStatus),
    /// Refused: retry after `wait`.
    Refused {
        wait: Duration,
        status: RateStatus,
    },
}

#[derive(Default)]
pub struct RateLimiter {
    blocks: Mutex<HashMap<Uuid, Block>>,
}

/// A tenth of a second's worth of the rate, at least one token.
fn block_size(per_minute: i32) -> u32 {
    (per_minute.max(0) as u32 / 600).clamp(1, MAX_BLOCK)
}

impl RateLimiter {
    pub async fn admit(
        &self,
        pool: &PgPool,
        key_id: Uuid,
        per_minute: i32,
    ) -> Result<Admission, DbError> {
        let limit = per_minute.max(0) as u32;
        if let Some(status) = self.take_local(key_id, per_minute) {
            return Ok(Admission::Admitted(status));
        }
        let wanted = block_size(per_minute);
        let mut conn = pool.get().await?;
        match limits::take_rate_tokens(&mut conn, key_id, per_minute, wanted).await? {
            RateGrant::Granted(granted, state) => {
                let spare = granted - 1;
                self.keep(key_id, per_minute, spare, state);
                let now = chrono::Utc::now();
                Ok(Admission::Admitted(RateStatus {
                    limit,
                    remaining: state.remaining(now).saturating_add(spare).min(limit),
                    reset: state.until_full(now),
                }))
            }
            RateGrant::Refused(wait) => Ok(Admission::Refused {
                wait,
                status: RateStatus {
                    limit,
                    remaining: 0,
                    reset: wait,
                },
            }),
        }
    }

    fn take_local(&self, key_id: Uuid, per_minute: i32) -> Option<RateStatus> {
        let mut blocks = self.blocks.lock().expect("rate blocks lock");
        match blocks.get_mut(&key_id) {
            // A plan change makes the old block worthless: drop it.
            Some(block)
                if block.left > 0
                    && block.per_minute == per_minute
                    && block.expires > Instant::now() =>
            {
                block.left -= 1;
                let limit = per_minute.max(0) as u32;
                let now = chrono::Utc::now();
                let (remaining, reset) = block.state.map_or((block.left, Duration::ZERO), |s| {
                    (
                        s.remaining(now).saturating_add(block.left),
                        s.until_full(now),
                    )
                });
                Some(RateStatus {
                    limit,
                    remaining: remaining.min(limit),
                    reset,
                })
            }
            _ => None,
        }
    }

    fn keep(&self, key_id: Uuid, per_minute: i32, spare: u32, state: RateState) {
        if spare == 0 {
            return;
        }
        let now = Instant::now();
        let mut blocks = self.blocks.lock().expect("rate blocks lock");
        if blocks.len() >= SWEEP_AT {
            blocks.retain(|_, block| block.expires > now && block.left > 0);
        }
        // Concurrent misses each take a block: add to a live one, never
        // overwrite it (its tokens are already spent in the database).
        let block = blocks.entry(key_id).or_insert(Block {
            left: 0,
            expires: now,
            per_minute,
            state: None,
        });
        if block.per_minute != per_minute || block.expires <= now {
            block.left = 0;
            block.per_minute = per_minute;
        }
        block.left += spare;
        block.expires = now + BLOCK_LIFETIME;
        block.state = Some(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_a_tenth_of_a_second_of_the_rate_within_bounds() {
        assert_eq!(block_size(60), 1);
        assert_eq!(block_size(1_199), 1);
        assert_eq!(block_size(6_000), 10);
        assert_eq!(block_size(10_000_000), MAX_BLOCK);
        assert_eq!(block_size(0), 1);
    }

    #[test]
    fn a_block_admits_exactly_its_tokens_for_its_plan_until_it_expires() {
        let limiter = RateLimiter::default();
        let key = Uuid::now_v7();
        let state = RateState::new(chrono::Utc::now(), 6_000);
        assert!(limiter.take_local(key, 6_000).is_none());
        limiter.keep(key, 60, 3, state);
        assert!(
            limiter.take_local(key, 6_000).is_none(),
            "another plan's block is not used"
        );
        limiter.keep(key, 6_000, 3, state);
        limiter.keep(key, 6_000, 2, state);
        assert!(
            (0..5).all(|_| limiter.take_local(key, 6_000).is_some()),
            "blocks taken concurrently add up"
        );
        assert!(limiter.take_local(key, 6_000).is_none());

        limiter.keep(key, 6_000, 5, state);
        limiter
            .blocks
            .lock()
            .unwrap()
            .get_mut(&key)
            .unwrap()
            .expires = Instant::now();
        assert!(
            limiter.take_local(key, 6_000).is_none(),
            "expired tokens are dropped"
        );
    }

    #[test]
    fn the_status_counts_what_the_database_has_left_and_the_block_holds() {
        let limiter = RateLimiter::default();
        let key = Uuid::now_v7();
        // Half a minute of the burst is spent: 3,000 of 6,000 left there.
        let half_spent = RateState::new(chrono::Utc::now() + chrono::Duration::seconds(30), 6_000);
        limiter.keep(key, 6_000, 10, half_spent);
        let status = limiter.take_local(key, 6_000).unwrap();
        assert_eq!(status.limit, 6_000);
        assert!((3_000..=3_009).contains(&status.remaining), "{status:?}");
        assert!(status.reset > Duration::from_secs(29) && status.reset <= Duration::from_secs(30));
    }
}
