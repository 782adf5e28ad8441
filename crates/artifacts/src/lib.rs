//! Agent artifacts: real files rendered from arguments a model supplies.
//!
//! Two tools use this: `generate_chart` (PNG or SVG, see [`chart`]) and
//! `create_document` (PDF, Markdown or CSV, see [`document`]). Each has a
//! `parse_*` function that turns the tool's JSON arguments into a validated
//! spec, with messages that name the offending field so the model can fix its
//! call, and a `render_*` function that is pure CPU work (callers run it in
//! `spawn_blocking`). Nothing here touches storage or the database.

pub mod args;
pub mod chart;
mod common;
pub mod document;
mod pdf;
mod spec;

pub use chart::{
    ChartFormat, ChartKind, ChartSpec, DEFAULT_CHART_HEIGHT, DEFAULT_CHART_WIDTH, Series,
    parse_chart_spec, render_chart,
};
pub use document::{DocumentFormat, DocumentSpec, parse_document_spec, render_document};

pub use common::{ArtifactError, Rendered};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::{format_number, guard, single_line};

    #[test]
    fn artifacts_numbers_are_formatted_without_float_noise() {
        assert_eq!(format_number(0.1 + 0.2), "0.3");
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(-0.0000001), "-1.00e-7");
        assert_eq!(format_number(42.0), "42");
        assert_eq!(format_number(1234.5), "1234.5");
        assert_eq!(format_number(25_000.0), "25k");
        assert_eq!(format_number(-3_500_000.0), "-3.5M");
        assert_eq!(format_number(7.25e9), "7.25B");
    }

    #[test]
    fn artifacts_single_line_strips_control_characters() {
        assert_eq!(single_line("  a\u{7}b\n\tc  "), "a b c");
        assert_eq!(single_line(""), "");
    }

    #[test]
    fn artifacts_guard_turns_a_panic_into_a_render_error() {
        let result: Result<(), ArtifactError> = guard("test", || panic!("boom"));
        assert!(matches!(result, Err(ArtifactError::Render(_))));
    }
}
