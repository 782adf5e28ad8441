pub mod billing;
pub mod lease_rescue;
pub mod relay;
pub mod webhooks;
