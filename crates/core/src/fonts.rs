//! The DejaVu fonts shipped in `assets/fonts` (free licence, see
//! LICENSE-DejaVu.txt), embedded once for every renderer that draws text
//! (logos, charts, PDF documents).

pub static SANS_BOLD: &[u8] = include_bytes!("../assets/fonts/DejaVuSans-Bold.ttf");
pub static SERIF_BOLD: &[u8] = include_bytes!("../assets/fonts/DejaVuSerif-Bold.ttf");
pub static MONO_BOLD: &[u8] = include_bytes!("../assets/fonts/DejaVuSansMono-Bold.ttf");
pub static CONDENSED_BOLD: &[u8] = include_bytes!("../assets/fonts/DejaVuSansCondensed-Bold.ttf");
