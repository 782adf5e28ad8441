//! Keyset cursors in page URLs: the last row's `(created_at, id)` of the
//! page before, as `<microseconds since the epoch>_<uuid>`. A cursor that
//! does not parse is a 400 page, never a 5xx.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::DashError;

/// The cursor naming a row.
pub fn encode(at: DateTime<Utc>, id: Uuid) -> String {
    format!("{}_{id}", at.timestamp_micros())
}

/// A cursor from a URL (`None` when absent or empty).
pub fn decode(raw: Option<&str>) -> Result<Option<(DateTime<Utc>, Uuid)>, DashError> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let bad = || {
        DashError::BadRequest("The page link is invalid: start again from the first page.".into())
    };
    let (micros, id) = raw.split_once('_').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
    let id: Uuid = id.parse().map_err(|_| bad())?;
    Ok(Some((at, id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_a_bad_request() {
        let at = DateTime::<Utc>::from_timestamp_micros(1_764_000_000_123_456).unwrap();
        let id = Uuid::now_v7();
        assert_eq!(decode(Some(&encode(at, id))).unwrap(), Some((at, id)));
        assert_eq!(decode(None).unwrap(), None);
        assert_eq!(decode(Some("")).unwrap(), None);
        for raw in [
            "x",
            "1_",
            "_x",
            "12_not-a-uuid",
            "99999999999999999999_00000000-0000-0000-0000-000000000000",
        ] {
            assert!(
                matches!(decode(Some(raw)), Err(DashError::BadRequest(_))),
                "{raw}"
            );
        }
    }
}
