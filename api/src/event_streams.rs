//! How many job event streams each organization holds open on this
//! process (hardening finding 10): a leaf the state and the stream route
//! both use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

/// Open streams per organization, on this process.
pub struct OpenStreams {
    max_per_org: usize,
    open: Mutex<HashMap<Uuid, usize>>,
}

/// One open stream's place; freed when the stream ends (or its client goes).
pub struct StreamPlace {
    streams: Arc<OpenStreams>,
    org_id: Uuid,
}

impl OpenStreams {
    pub fn new(max_per_org: usize) -> Self {
        Self {
            max_per_org,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// A place for one more stream of `org_id`, or `None` at the cap.
    pub fn take(self: &Arc<Self>, org_id: Uuid) -> Option<StreamPlace> {
        let mut open = self.open.lock().expect("open streams lock");
        let count = open.entry(org_id).or_insert(0);
        if *count >= self.max_per_org {
            return None;
        }
        *count += 1;
        Some(StreamPlace {
            streams: self.clone(),
            org_id,
        })
    }

    #[cfg(test)]
    fn open_for(&self, org_id: Uuid) -> usize {
        self.open
            .lock()
            .expect("open streams lock")
            .get(&org_id)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().expect("open streams lock");
        if let Some(count) = open.get_mut(&self.org_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.org_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_organization_holds_at_most_its_open_streams() {
        let streams = Arc::new(OpenStreams::new(2));
        let (org, other) = (Uuid::new_v4(), Uuid::new_v4());
        let first = streams.take(org).unwrap();
        let second = streams.take(org).unwrap();
        assert!(streams.take(org).is_none(), "the third is refused");
        assert!(streams.take(other).is_some(), "another organization's own");
        drop(first);
        assert_eq!(streams.open_for(org), 1);
        let third = streams.take(org).expect("a place freed");
        drop((second, third));
        assert_eq!(streams.open_for(org), 0);
    }
}
