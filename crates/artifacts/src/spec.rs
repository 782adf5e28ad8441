//! The document spec: what `create_document` asks for, parsed and bounded.

use serde::Deserialize;
use serde_json::Value;

use crate::args;
use crate::common::{ArtifactError, single_line};

const MAX_TITLE_CHARS: usize = 200;
const MAX_CONTENT_CHARS: usize = 100_000;
const MAX_COLUMNS: usize = 50;
const MAX_COLUMN_CHARS: usize = 200;
const MAX_ROWS: usize = 10_000;
const MAX_CELL_CHARS: usize = 5_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DocumentFormat {
    Pdf,
    #[serde(alias = "md")]
    Markdown,
    Csv,
}

impl DocumentFormat {
    pub fn extension(self) -> &'static str {
        match self {
            Self::Pdf => "pdf",
            Self::Markdown => "md",
            Self::Csv => "csv",
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            Self::Pdf => "application/pdf",
            Self::Markdown => "text/markdown; charset=utf-8",
            Self::Csv => "text/csv; charset=utf-8",
        }
    }
}

/// A document to write. Build it with [`parse_document_spec`];
/// [`render_document`] validates again.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DocumentSpec {
    pub format: DocumentFormat,
    pub title: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub columns: Option<Vec<String>>,
    /// Cells are JSON scalars: strings, numbers, booleans or null (empty).
    #[serde(default)]
    pub rows: Option<Vec<Vec<Value>>>,
}

/// Reads and validates `create_document` arguments.
pub fn parse_document_spec(args: &Value) -> Result<DocumentSpec, ArtifactError> {
    let obj = args::object(args, "document arguments")?;
    let columns = match obj.get("columns") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            args::array(obj, "columns", "columns")?
                .iter()
                .enumerate()
                .map(|(i, c)| match c {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(ArtifactError::invalid(format!(
                        "columns[{i}] must be a string, got {}",
                        args::kind(other)
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let rows = match obj.get("rows") {
        None | Some(Value::Null) => None,
        Some(_) => Some(
            args::array(obj, "rows", "rows")?
                .iter()
                .enumerate()
                .map(|(i, row)| parse_row(i, row, columns.as_deref()))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let spec = DocumentSpec {
        format: args::required(obj, "format", "format")?,
        title: args::required(obj, "title", "title")?,
        content: args::optional(obj, "content", "content")?,
        columns,
        rows,
    };
    spec.validate()?;
    Ok(spec)
}

/// A row is an array of cells, or (a common model habit) an object keyed by
/// column name, which is put in column order.
fn parse_row(
    i: usize,
    row: &Value,
    columns: Option<&[String]>,
) -> Result<Vec<Value>, ArtifactError> {
    match (row, columns) {
        (Value::Array(cells), _) => Ok(cells.clone()),
        (Value::Object(map), Some(columns)) => {
            if let Some(key) = map.keys().find(|k| !columns.contains(k)) {
                return Err(ArtifactError::invalid(format!(
                    "rows[{i}] has the key {key:?}, which is not one of columns"
                )));
            }
            Ok(columns
                .iter()
                .map(|c| map.get(c).cloned().unwrap_or(Value::Null))
                .collect())
        }
        (other, _) => Err(ArtifactError::invalid(format!(
            "rows[{i}] must be an array of cells, got {}",
            args::kind(other)
        ))),
    }
}

impl DocumentSpec {
    /// Checks every limit; messages name the field.
    pub fn validate(&self) -> Result<(), ArtifactError> {
        if single_line(&self.title).is_empty() {
            return Err(ArtifactError::invalid("title must not be empty"));
        }
        args::check_length(&self.title, MAX_TITLE_CHARS, "title")?;
        let content = self.content.as_deref().unwrap_or_default();
        args::check_length(content, MAX_CONTENT_CHARS, "content")?;
        if let Some(columns) = &self.columns {
            if columns.is_empty() {
                return Err(ArtifactError::invalid(
                    "columns must name at least one column",
                ));
            }
            if columns.len() > MAX_COLUMNS {
                return Err(ArtifactError::invalid(format!(
                    "columns has {} entries; at most {MAX_COLUMNS} are allowed",
                    columns.len()
                )));
            }
            for (i, column) in columns.iter().enumerate() {
                args::check_length(column, MAX_COLUMN_CHARS, &format!("columns[{i}]"))?;
            }
        }
        if let Some(rows) = &self.rows {
            let Some(columns) = &self.columns else {
                return Err(ArtifactError::invalid(
                    "rows needs columns: the header names, one per cell",
                ));
            };
            if rows.len() > MAX_ROWS {
                return Err(ArtifactError::invalid(format!(
                    "rows has {} entries; at most {MAX_ROWS} are allowed",
                    rows.len()
                )));
            }
            for (i, row) in rows.iter().enumerate() {
                if row.len() != columns.len() {
                    return Err(ArtifactError::invalid(format!(
                        "rows[{i}] has {} cells for {} columns",
                        row.len(),
                        columns.len()
                    )));
                }
                for (j, cell) in row.iter().enumerate() {
                    let path = format!("rows[{i}][{j}]");
                    match cell {
                        Value::Array(_) | Value::Object(_) => {
                            return Err(ArtifactError::invalid(format!(
                                "{path} must be a string, number, boolean or null, got {}",
                                args::kind(cell)
                            )));
                        }
                        Value::String(s) => args::check_length(s, MAX_CELL_CHARS, &path)?,
                        Value::Null | Value::Bool(_) | Value::Number(_) => {}
                    }
                }
            }
        }
        match self.format {
            DocumentFormat::Csv => {
                if self.columns.is_none() {
                    return Err(ArtifactError::invalid(
                        "columns is required for a csv document (the header row)",
                    ));
                }
                if !content.trim().is_empty() {
                    return Err(ArtifactError::invalid(
                        "content: a csv document holds only columns and rows; \
                         use markdown or pdf for prose",
                    ));
                }
            }
            DocumentFormat::Pdf | DocumentFormat::Markdown => {
                if content.trim().is_empty() && self.columns.is_none() {
                    return Err(ArtifactError::invalid(
                        "content is required (or columns and rows for a table)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The table, if any: header and rows as display text.
    pub(super) fn table(&self) -> Option<(Vec<String>, Vec<Vec<Cell>>)> {
        let columns = self.columns.as_ref()?;
        let rows = self
            .rows
            .iter()
            .flatten()
            .map(|row| row.iter().map(Cell::from_json).collect())
            .collect();
        Some((columns.clone(), rows))
    }
}

/// A table cell as text, remembering whether it was a number (numbers are
/// right-aligned in the PDF).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cell {
    pub text: String,
    pub numeric: bool,
}

impl Cell {
    fn from_json(value: &Value) -> Self {
        let (text, numeric) = match value {
            Value::Null => (String::new(), false),
            Value::Bool(b) => (b.to_string(), false),
            Value::Number(n) => (n.to_string(), true),
            Value::String(s) => (s.clone(), false),
            // Refused by validation; kept readable should a caller skip it.
            Value::Array(_) | Value::Object(_) => (value.to_string(), false),
        };
        Self { text, numeric }
    }
}
