//! The plan's request rate, per key, across every API process.
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

use unigen_db::queries::limits::RateGrant;
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
    /// `Ok(None)`: admitted; `Ok(Some(wait))`: refused, retry after `wait`.
    pub async fn admit(
        &self,
        pool: &PgPool,
        key_id: Uuid,
        per_minute: i32,
    ) -> Result<Option<Duration>, DbError> {
        if self.take_local(key_id, per_minute) {
            return Ok(None);
        }
        let wanted = block_size(per_minute);
        let mut conn = pool.get().await?;
        match limits::take_rate_tokens(&mut conn, key_id, per_minute, wanted).await? {
            RateGrant::Granted(granted) => {
                self.keep(key_id, per_minute, granted - 1);
                Ok(None)
            }
            RateGrant::Refused(wait) => Ok(Some(wait)),
        }
    }

    fn take_local(&self, key_id: Uuid, per_minute: i32) -> bool {
        let mut blocks = self.blocks.lock().expect("rate blocks lock");
        match blocks.get_mut(&key_id) {
            // A plan change makes the old block worthless: drop it.
            Some(block)
                if block.left > 0
                    && block.per_minute == per_minute
                    && block.expires > Instant::now() =>
            {
                block.left -= 1;
                true
            }
            _ => false,
        }
    }

    fn keep(&self, key_id: Uuid, per_minute: i32, spare: u32) {
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
        });
        if block.per_minute != per_minute || block.expires <= now {
            block.left = 0;
            block.per_minute = per_minute;
        }
        block.left += spare;
        block.expires = now + BLOCK_LIFETIME;
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
        assert!(!limiter.take_local(key, 6_000));
        limiter.keep(key, 60, 3);
        assert!(
            !limiter.take_local(key, 6_000),
            "another plan's block is not used"
        );
        limiter.keep(key, 6_000, 3);
        limiter.keep(key, 6_000, 2);
        assert!(
            (0..5).all(|_| limiter.take_local(key, 6_000)),
            "blocks taken concurrently add up"
        );
        assert!(!limiter.take_local(key, 6_000));

        limiter.keep(key, 6_000, 5);
        limiter
            .blocks
            .lock()
            .unwrap()
            .get_mut(&key)
            .unwrap()
            .expires = Instant::now();
        assert!(
            !limiter.take_local(key, 6_000),
            "expired tokens are dropped"
        );
    }
}
