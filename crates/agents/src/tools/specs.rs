//! The function specs offered to the model: one JSON Schema per tool, with
//! the limits the executor enforces, so a well-behaved model never trips
//! them.

use serde_json::json;

use super::analyze_image::MAX_QUESTION_CHARS;
use super::generate_text::{MAX_PROMPT_CHARS, MAX_SYSTEM_CHARS};
use super::web::{MAX_QUERY_CHARS, MAX_SEARCH_RESULTS, MAX_URL_CHARS};
use unigen_core::params::image::MAX_PROMPT_CHARS as MAX_IMAGE_PROMPT_CHARS;
use unigen_core::params::image::{SIZES, STYLES};
use unigen_providers::llm::ToolSpec;

/// The specs of the `enabled` tool ids, in that order; unknown ids are
/// left out (agents are validated against [`super::super::TOOLS`]).
pub fn tool_specs(enabled: &[String]) -> Vec<ToolSpec> {
    enabled.iter().filter_map(|id| spec(id)).collect()
}

fn spec(id: &str) -> Option<ToolSpec> {
    let (description, parameters) = match id {
        "web_search" => (
            "Search the web. Returns the top results as title, url and snippet; \
             use web_fetch to read a result in full.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for.", "maxLength": MAX_QUERY_CHARS},
                    "max_results": {"type": "integer", "description": "How many results to return (default: the server's setting).", "minimum": 1, "maximum": MAX_SEARCH_RESULTS},
                },
                "required": ["query"],
                "additionalProperties": false,
            }),
        ),
        "web_fetch" => (
            "Read a web page or text file (HTML, plain text, Markdown, JSON) as text: its title \
             and readable content, cut to about 20,000 characters.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "An http:// or https:// URL.", "maxLength": MAX_URL_CHARS},
                },
                "required": ["url"],
                "additionalProperties": false,
            }),
        ),
        "generate_text" => (
            "Have the language model write text in a separate completion (drafts, summaries, \
             translations), without the conversation so far.",
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The instruction and any material it needs.", "maxLength": MAX_PROMPT_CHARS},
                    "system": {"type": "string", "description": "Optional system instructions (tone, format).", "maxLength": MAX_SYSTEM_CHARS},
                    "max_tokens": {"type": "integer", "description": "Longest answer in tokens (at most the agent's max_tokens).", "minimum": 1},
                },
                "required": ["prompt"],
                "additionalProperties": false,
            }),
        ),
        "generate_image" => (
            "Generate one image from a text description. Returns its URL, width and height.",
            json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "What the image shows.", "maxLength": MAX_IMAGE_PROMPT_CHARS},
                    "size": {"type": "string", "enum": SIZES, "description": "Width x height in pixels (default 1024x1024)."},
                    "style": {"type": "string", "enum": STYLES, "description": "Default vivid."},
                    "negative_prompt": {"type": "string", "description": "What to keep out of the image.", "maxLength": MAX_IMAGE_PROMPT_CHARS},
                    "seed": {"type": "integer", "description": "Same seed and prompt give the same image.", "minimum": 0, "maximum": super::generate_image::MAX_SEED},
                },
                "required": ["prompt"],
                "additionalProperties": false,
            }),
        ),
        "analyze_image" => (
            "Look at an image (JPEG, PNG or WebP) and answer a question about it. Also returns \
             measured facts: width, height, format, dominant colours and mean brightness.",
            json!({
                "type": "object",
                "properties": {
                    "image_url": {"type": "string", "description": "An http(s) URL of the image, a file URL from an earlier tool result, or base64 data (data:image/png;base64,...)."},
                    "question": {"type": "string", "description": "What to find out (default: describe the image).", "maxLength": MAX_QUESTION_CHARS},
                },
                "required": ["image_url"],
                "additionalProperties": false,
            }),
        ),
        "generate_chart" => (
            "Draw a bar, line, pie or scatter chart as a PNG or SVG file. Returns its URL.",
            json!({
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["bar", "line", "pie", "scatter"]},
                    "title": {"type": "string", "maxLength": 200},
                    "labels": {"type": "array", "items": {"type": "string"}, "description": "Category names along the x axis (bar, line) or slice names (pie): one per value. Scatter: optional, one per point."},
                    "series": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 10,
                        "description": "Data series. Pie charts take exactly one.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "values": {"type": "array", "items": {"type": "number"}, "description": "Bar, line, pie: one value per label."},
                                "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}, "description": "Scatter: [x, y] pairs."},
                            },
                        },
                    },
                    "x_label": {"type": "string", "maxLength": 100},
                    "y_label": {"type": "string", "maxLength": 100},
                    "format": {"type": "string", "enum": ["png", "svg"], "description": "Default png."},
                    "width": {"type": "integer", "minimum": 200, "maximum": 2000, "description": "Pixels, default 800."},
                    "height": {"type": "integer", "minimum": 200, "maximum": 2000, "description": "Pixels, default 500."},
                },
                "required": ["kind", "series"],
                "additionalProperties": false,
            }),
        ),
        "create_document" => (
            "Write a PDF, Markdown or CSV file. Returns its URL and file name.",
            json!({
                "type": "object",
                "properties": {
                    "format": {"type": "string", "enum": ["pdf", "markdown", "csv"]},
                    "title": {"type": "string", "maxLength": 200, "description": "Also names the file."},
                    "content": {"type": "string", "description": "Markdown text: paragraphs, # headings, - bullets, 1. items, ``` code, | tables. Not for csv."},
                    "columns": {"type": "array", "items": {"type": "string"}, "description": "Table header; required for csv."},
                    "rows": {"type": "array", "items": {"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}}, "description": "Table rows, one cell per column."},
                },
                "required": ["format", "title"],
                "additionalProperties": false,
            }),
        ),
        _ => return None,
    };
    Some(ToolSpec {
        name: id.to_owned(),
        description: description.to_owned(),
        parameters,
    })
}

/// Used by the tests: every parameter schema in one list.
#[cfg(test)]
pub(super) fn all_parameters() -> Vec<(String, serde_json::Value)> {
    super::super::TOOLS
        .iter()
        .filter_map(|(id, _)| spec(id))
        .map(|spec| (spec.name, spec.parameters))
        .collect()
}
