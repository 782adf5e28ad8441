//! `web_search` (the configured search backend) and `web_fetch` (a page read
//! as text through the SSRF-guarded [`unigen_core::fetch::Fetcher`]).

use serde_json::json;

use super::args::Args;
use super::html;
use super::kit::{Done, Failure, ToolDeps, blocking};
use unigen_core::fetch::PageKind;

pub(super) const MAX_QUERY_CHARS: usize = 500;
pub(super) const MAX_SEARCH_RESULTS: i64 = 10;
pub(super) const MAX_URL_CHARS: usize = 2048;
/// Bytes of a page read at most; a longer page is read up to here.
pub(super) const PAGE_MAX_BYTES: usize = 2 * 1024 * 1024;
/// Characters of page text returned at most: about 5,000 tokens.
pub(super) const PAGE_MAX_CHARS: usize = 20_000;

pub(super) async fn web_search(deps: &ToolDeps, args: &Args<'_>) -> Result<Done, Failure> {
    let query = args.required_text("query", MAX_QUERY_CHARS)?.trim();
    let max_results = args.integer("max_results", 1, MAX_SEARCH_RESULTS)?;
    let Some(search) = &deps.search else {
        return Err(Failure::new("web search is not configured on this server"));
    };
    // The client logs the cause (it may quote the backend's answer).
    let mut results = search
        .search(query)
        .await
        .map_err(|_| Failure::new("web search failed; try again later"))?;
    if let Some(max) = max_results {
        results.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    }
    Ok(Done::output(json!({ "query": query, "results": results })))
}

pub(super) async fn web_fetch(deps: &ToolDeps, args: &Args<'_>) -> Result<Done, Failure> {
    let url = args.required_text("url", MAX_URL_CHARS)?.trim().to_owned();
    let page = deps
        .fetcher
        .load_page("url", &url, PAGE_MAX_BYTES)
        .await
        .map_err(|err| Failure::new(err.to_string()))?;
    let (title, text) = match page.kind {
        PageKind::Html => {
            let readable = blocking("html", move || html::readable(&page.text)).await?;
            (readable.title, readable.text)
        }
        PageKind::Plain | PageKind::Markdown | PageKind::Json => (None, page.text),
    };
    let (content, cut) = truncate_chars(text, PAGE_MAX_CHARS);
    Ok(Done::output(json!({
        "url": url,
        "final_url": page.final_url,
        "title": title,
        "content": content,
        "content_type": page.content_type,
        "truncated": page.truncated || cut,
    })))
}

/// At most `max` characters of `text`, and whether it was cut.
fn truncate_chars(mut text: String, max: usize) -> (String, bool) {
    match text.char_indices().nth(max) {
        Some((cut, _)) => {
            text.truncate(cut);
            (text, true)
        }
        None => (text, false),
    }
}
