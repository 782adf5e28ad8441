//! Pure translations between the wire formats clients speak and the
//! internal chat completion request (OpenAI's chat shape): no I/O, so every
//! mapping is unit-tested here and the API routes (and workers) call them.

pub mod anthropic;
pub mod batch;
pub mod responses;
