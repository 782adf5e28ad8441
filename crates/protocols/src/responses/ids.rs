//! Output item ids, minted in order from a response's own id.

/// Item ids minted from one base (a response's unique part):
/// `<prefix>_<base><n>`, in order, so ids within a response never collide
/// and a response's ids never collide with another's.
#[derive(Debug, Clone)]
pub struct Ids {
    base: String,
    next: u32,
}

impl Ids {
    pub fn new(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            next: 0,
        }
    }

    /// The next id with `prefix` (`msg`, `fc`, `fco`).
    pub fn mint(&mut self, prefix: &str) -> String {
        let id = format!("{prefix}_{}{:04x}", self.base, self.next);
        self.next += 1;
        id
    }
}
