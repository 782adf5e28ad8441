-- The W3C `traceparent` of the span that published the job (issue 37): work
-- that starts outside a message (the relay's republish, the deadline sweep,
-- webhook attempts) links back to the job's trace. NULL when tracing was off.
ALTER TABLE jobs ADD COLUMN trace_context text;
