//! What a logo request asks for.

/// What to draw. Free-text fields are matched loosely (case-insensitive
/// keywords); unknown values fall back to sensible defaults.
#[derive(Debug, Clone)]
pub struct LogoSpec<'a> {
    /// E.g. "Acme Rockets, reusable launch vehicles": the brand name is the
    /// part before the first comma/colon/dash (or the first capitalised
    /// words); a short descriptive rest becomes the tagline.
    pub prompt: &'a str,
    /// minimal | modern | vintage | playful | corporate | tech | organic | geometric
    pub style: &'a str,
    /// technology | healthcare | finance | education | retail | food | travel | entertainment
    pub industry: &'a str,
    /// Free text such as "navy and gold" or "#0a7cff, white".
    pub color_scheme: Option<&'a str>,
    /// sans-serif | serif | script | display | monospace
    pub typography: Option<&'a str>,
    /// professional | friendly | bold | elegant | playful
    pub mood: Option<&'a str>,
    /// 1..=5: how many elements and details the emblem has.
    pub complexity: u8,
    /// "no text" gives an emblem-only logo; colour words steer the palette away.
    pub negative_prompt: Option<&'a str>,
    pub seed: u64,
    pub width: u32,
    pub height: u32,
}
