use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use unigen_core::config::RabbitSettings;

/// Names and declarations of the job exchange, one quorum queue per tool, and
/// a dead-letter queue per tool for messages that cannot be processed.
#[derive(Debug, Clone)]
pub struct Topology {
    prefix: String,
    queue_type: String,
    expires_ms: Option<u32>,
}

impl Topology {
    pub fn new(settings: &RabbitSettings) -> Self {
        Self {
            prefix: settings.prefix.clone(),
            queue_type: settings.queue_type.clone(),
            expires_ms: settings.queue_expires_ms,
        }
    }

    pub fn exchange(&self) -> String {
        format!("{}unigen.jobs", self.prefix)
    }

    pub fn dead_letter_exchange(&self) -> String {
        format!("{}unigen.jobs.dead", self.prefix)
    }

    pub fn queue(&self, tool: &str) -> String {
        format!("{}jobs.{tool}", self.prefix)
    }

    pub fn dead_letter_queue(&self, tool: &str) -> String {
        format!("{}jobs.{tool}.dead", self.prefix)
    }

    /// Declares everything for these queue names (idempotent).
    pub async fn declare(&self, channel: &Channel, tools: &[&str]) -> lapin::Result<()> {
        let ephemeral = self.expires_ms.is_some();
        let exchange_options = ExchangeDeclareOptions {
            durable: true,
            auto_delete: ephemeral,
            ..Default::default()
        };
        for exchange in [self.exchange(), self.dead_letter_exchange()] {
            channel
                .exchange_declare(
                    exchange.into(),
                    ExchangeKind::Direct,
                    exchange_options,
                    FieldTable::default(),
                )
                .await?;
        }
        for tool in tools {
            let dead_args = self.queue_arguments(None);
            self.declare_bound(
                channel,
                &self.dead_letter_queue(tool),
                &self.dead_letter_exchange(),
                tool,
                dead_args,
            )
            .await?;
            let args = self.job_queue_arguments(tool);
            self.declare_bound(channel, &self.queue(tool), &self.exchange(), tool, args)
                .await?;
        }
        Ok(())
    }

    /// The arguments a tool's job queue is declared with.
    pub fn job_queue_arguments(&self, tool: &str) -> FieldTable {
        self.queue_arguments(Some(tool))
    }

    fn queue_arguments(&self, dead_letter_to: Option<&str>) -> FieldTable {
        let mut args = FieldTable::default();
        args.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString(self.queue_type.clone().into()),
        );
        if let Some(tool) = dead_letter_to {
            args.insert(
                ShortString::from("x-dead-letter-exchange"),
                AMQPValue::LongString(self.dead_letter_exchange().into()),
            );
            args.insert(
                ShortString::from("x-dead-letter-routing-key"),
                AMQPValue::LongString((*tool).into()),
            );
        }
        if let Some(ms) = self.expires_ms {
            args.insert(ShortString::from("x-expires"), AMQPValue::LongUInt(ms));
        }
        args
    }

    async fn declare_bound(
        &self,
        channel: &Channel,
        queue: &str,
        exchange: &str,
        routing_key: &str,
        args: FieldTable,
    ) -> lapin::Result<()> {
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                args,
            )
            .await?;
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                routing_key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
    }
}
