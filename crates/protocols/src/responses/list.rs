//! A page of a response's input items (`GET /responses/{id}/input_items`):
//! `order` (`desc`, the default, newest first; or `asc`), `after` (an item
//! id: the page starts after it), `limit` (1 to 100, default 20).

use serde_json::{Value, json};

use super::Invalid;

pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 100;

/// The `list` object of the page.
pub fn page(
    items: &[Value],
    order: Option<&str>,
    after: Option<&str>,
    limit: Option<&str>,
) -> Result<Value, Invalid> {
    let limit = match limit {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                Invalid::new(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_LIMIT}"),
                )
            })?,
    };
    let ordered: Vec<&Value> = match order {
        None | Some("desc") => items.iter().rev().collect(),
        Some("asc") => items.iter().collect(),
        Some(_) => return Err(Invalid::new("order", "order must be `asc` or `desc`")),
    };
    let start = match after {
        None => 0,
        Some(id) => {
            ordered
                .iter()
                .position(|item| item["id"] == id)
                .ok_or_else(|| {
                    Invalid::new(
                        "after",
                        format!("after: no input item `{id}` in this response"),
                    )
                })?
                + 1
        }
    };
    let data: Vec<Value> = ordered
        .iter()
        .skip(start)
        .take(limit)
        .map(|item| (*item).clone())
        .collect();
    let has_more = start + data.len() < ordered.len();
    Ok(json!({
        "object": "list",
        "first_id": data.first().map(|i| i["id"].clone()),
        "last_id": data.last().map(|i| i["id"].clone()),
        "has_more": has_more,
        "data": data,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<Value> {
        (0..n).map(|i| json!({"id": format!("i{i}")})).collect()
    }

    fn ids(page: &Value) -> Vec<&str> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn pages_go_newest_first_by_default_and_continue_after_an_id() {
        let all = items(5);
        let first = page(&all, None, None, Some("2")).unwrap();
        assert_eq!(ids(&first), ["i4", "i3"]);
        assert_eq!(
            (first["first_id"].as_str(), first["last_id"].as_str()),
            (Some("i4"), Some("i3"))
        );
        assert_eq!(first["has_more"], true);
        let last = page(&all, None, Some("i1"), None).unwrap();
        assert_eq!(ids(&last), ["i0"]);
        assert_eq!(last["has_more"], false);
        let asc = page(&all, Some("asc"), Some("i2"), None).unwrap();
        assert_eq!(ids(&asc), ["i3", "i4"]);
        let empty = page(&[], None, None, None).unwrap();
        assert_eq!(empty["first_id"], Value::Null);
        assert_eq!(empty["object"], "list");
    }

    #[test]
    fn bad_parameters_are_named() {
        let all = items(2);
        assert_eq!(
            page(&all, Some("up"), None, None).unwrap_err().param,
            "order"
        );
        assert_eq!(
            page(&all, None, Some("nope"), None).unwrap_err().param,
            "after"
        );
        assert_eq!(
            page(&all, None, None, Some("0")).unwrap_err().param,
            "limit"
        );
        assert_eq!(
            page(&all, None, None, Some("101")).unwrap_err().param,
            "limit"
        );
        assert_eq!(
            page(&all, None, None, Some("x")).unwrap_err().param,
            "limit"
        );
    }
}
