// Mirrors migrations/. Kept by hand: diesel_cli needs libpq, which we do not ship.

diesel::table! {
    plans (code) {
        code -> Text,
        name -> Text,
        included_credits -> Int8,
        overage_rate_micros -> Nullable<Int8>,
        rate_limit_per_minute -> Int4,
        concurrent_requests -> Int4,
        chat_tokens -> Nullable<Int8>,
        image_generations -> Nullable<Int8>,
        video_seconds -> Nullable<Int8>,
        stt_seconds -> Nullable<Int8>,
        tts_chars -> Nullable<Int8>,
        image_edits -> Nullable<Int8>,
        music_tracks -> Nullable<Int8>,
        agent_runs -> Nullable<Int8>,
        max_agents -> Int4,
        tools_per_agent -> Int4,
        max_iterations -> Int4,
        knowledge_files_per_agent -> Int4,
        max_file_size_mb -> Int4,
        max_webhooks -> Int4,
        max_api_keys -> Int4,
    }
}

diesel::table! {
    organizations (id) {
        id -> Uuid,
        name -> Text,
        email -> Nullable<Text>,
        plan_code -> Text,
        status -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    api_keys (id) {
        id -> Uuid,
        org_id -> Uuid,
        name -> Text,
        key_hash -> Bytea,
        key_prefix -> Text,
        scopes -> Array<Text>,
        expires_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
        last_used_at -> Nullable<Timestamptz>,
        created_by_key -> Nullable<Uuid>,
        created_by_member -> Nullable<Uuid>,
    }
}

diesel::table! {
    jobs (id) {
        id -> Uuid,
        org_id -> Uuid,
        api_key_id -> Uuid,
        tool -> Text,
        status -> Text,
        progress -> Int2,
        model -> Text,
        model_tier -> Text,
        input_params -> Jsonb,
        output_data -> Nullable<Jsonb>,
        estimated_credits -> Int8,
        actual_credits -> Nullable<Int8>,
        error_message -> Nullable<Text>,
        attempt -> Int4,
        enqueued_at -> Nullable<Timestamptz>,
        worker_id -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
        started_at -> Nullable<Timestamptz>,
        completed_at -> Nullable<Timestamptz>,
        usage -> Nullable<Jsonb>,
        cancel_after -> Nullable<Timestamptz>,
        trace_context -> Nullable<Text>,
    }
}

diesel::table! {
    events (id) {
        id -> Uuid,
        org_id -> Uuid,
        #[sql_name = "type"]
        kind -> Text,
        data -> Jsonb,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    billing_accounts (org_id) {
        org_id -> Uuid,
        period_start -> Timestamptz,
        period_end -> Timestamptz,
        included_credits -> Int8,
        included_remaining -> Int8,
        purchased_balance -> Int8,
        reserved_credits -> Int8,
        overage_credits -> Int8,
        overage_enabled -> Bool,
        soft_limit -> Nullable<Int8>,
        hard_limit -> Nullable<Int8>,
        notification_email -> Nullable<Text>,
        notification_thresholds -> Array<Int4>,
        soft_limit_notified -> Bool,
        credits_low_notified -> Bool,
        credits_depleted_notified -> Bool,
        last_notification_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    quota_usage (org_id, period_start, bucket) {
        org_id -> Uuid,
        period_start -> Timestamptz,
        bucket -> Text,
        used_milli -> Int8,
        reserved_milli -> Int8,
        low_notified -> Bool,
        depleted_notified -> Bool,
    }
}

diesel::table! {
    reservations (id) {
        id -> Uuid,
        org_id -> Uuid,
        credits -> Int8,
        bucket -> Nullable<Text>,
        bucket_milli -> Int8,
        period_start -> Timestamptz,
        expires_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    credit_transactions (id) {
        id -> Uuid,
        org_id -> Uuid,
        #[sql_name = "type"]
        kind -> Text,
        amount -> Int8,
        balance_after -> Int8,
        description -> Text,
        metadata -> Jsonb,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    usage_records (id) {
        id -> Uuid,
        org_id -> Uuid,
        api_key_id -> Nullable<Uuid>,
        endpoint -> Text,
        method -> Text,
        model -> Text,
        credits -> Int8,
        latency_ms -> Int8,
        status -> Text,
        tools_used -> Array<Text>,
        prompt_tokens -> Int8,
        completion_tokens -> Int8,
        total_tokens -> Int8,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    rate_limits (api_key_id) {
        api_key_id -> Uuid,
        tat -> Timestamptz,
    }
}

diesel::table! {
    concurrency_slots (org_id, slot) {
        org_id -> Uuid,
        slot -> Int4,
        holder -> Nullable<Uuid>,
        expires_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    webhooks (id) {
        id -> Uuid,
        org_id -> Uuid,
        name -> Text,
        url -> Text,
        events -> Array<Text>,
        enabled -> Bool,
        secret -> Text,
        headers -> Jsonb,
        consecutive_failures -> Int4,
        disabled_at -> Nullable<Timestamptz>,
        disabled_reason -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        manual_window_at -> Nullable<Timestamptz>,
        manual_sends -> Int4,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Uuid,
        webhook_id -> Uuid,
        event_id -> Uuid,
        status -> Text,
        attempts -> Int4,
        next_attempt_at -> Timestamptz,
        last_status_code -> Nullable<Int4>,
        last_error -> Nullable<Text>,
        created_at -> Timestamptz,
        completed_at -> Nullable<Timestamptz>,
        manual_attempt -> Bool,
        manual_attempts -> Int4,
        resume_at -> Nullable<Timestamptz>,
        leased_until -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    webhook_attempts (delivery_id, number) {
        delivery_id -> Uuid,
        number -> Int4,
        started_at -> Timestamptz,
        duration_ms -> Int4,
        status_code -> Nullable<Int4>,
        error -> Nullable<Text>,
        request_headers -> Jsonb,
        response_body -> Nullable<Text>,
    }
}

diesel::joinable!(organizations -> plans (plan_code));
diesel::joinable!(events -> organizations (org_id));
diesel::joinable!(api_keys -> organizations (org_id));
diesel::joinable!(jobs -> organizations (org_id));
diesel::table! {
    agents (id) {
        id -> Uuid,
        org_id -> Nullable<Uuid>,
        name -> Text,
        description -> Text,
        icon -> Text,
        system_prompt -> Text,
        model -> Text,
        tools -> Array<Text>,
        temperature -> Float8,
        max_tokens -> Int4,
        max_iterations -> Int4,
        memory_enabled -> Bool,
        is_template -> Bool,
        is_public -> Bool,
        template_category -> Nullable<Text>,
        run_count -> Int8,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    agent_runs (id) {
        id -> Uuid,
        org_id -> Uuid,
        agent_id -> Uuid,
        api_key_id -> Nullable<Uuid>,
        session_id -> Text,
        status -> Text,
        input -> Text,
        output -> Nullable<Text>,
        error_message -> Nullable<Text>,
        total_steps -> Int4,
        tokens_used -> Int8,
        credits_used -> Int8,
        duration_ms -> Nullable<Int8>,
        created_at -> Timestamptz,
        completed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    agent_run_steps (run_id, step_number) {
        run_id -> Uuid,
        step_number -> Int4,
        step_type -> Text,
        content -> Text,
        tool_name -> Nullable<Text>,
        tool_input -> Nullable<Jsonb>,
        tool_output -> Nullable<Jsonb>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    knowledge_files (id) {
        id -> Uuid,
        org_id -> Uuid,
        agent_id -> Uuid,
        filename -> Text,
        format -> Text,
        size_bytes -> Int8,
        storage_key -> Text,
        status -> Text,
        error_message -> Nullable<Text>,
        chunk_count -> Int4,
        attempt -> Int4,
        worker_id -> Nullable<Text>,
        lease_expires_at -> Nullable<Timestamptz>,
        enqueued_at -> Nullable<Timestamptz>,
        embedding_model -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        processed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    knowledge_chunks (file_id, chunk_index) {
        file_id -> Uuid,
        chunk_index -> Int4,
        agent_id -> Uuid,
        content -> Text,
        token_count -> Int4,
        embedding -> Array<Float4>,
    }
}

diesel::joinable!(jobs -> api_keys (api_key_id));
diesel::joinable!(billing_accounts -> organizations (org_id));
diesel::joinable!(usage_records -> organizations (org_id));
diesel::joinable!(webhooks -> organizations (org_id));
diesel::table! {
    idempotency_keys (org_id, idem_key) {
        org_id -> Uuid,
        idem_key -> Text,
        fingerprint -> Bytea,
        state -> Text,
        status_code -> Nullable<Int2>,
        content_type -> Nullable<Text>,
        body -> Nullable<Bytea>,
        agent_run_id -> Nullable<Uuid>,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        claim_id -> Uuid,
        job_id -> Nullable<Uuid>,
    }
}

diesel::joinable!(webhook_deliveries -> webhooks (webhook_id));
diesel::joinable!(webhook_deliveries -> events (event_id));
diesel::joinable!(webhook_attempts -> webhook_deliveries (delivery_id));
diesel::joinable!(agents -> organizations (org_id));
diesel::joinable!(agent_runs -> agents (agent_id));
diesel::joinable!(agent_run_steps -> agent_runs (run_id));
diesel::joinable!(knowledge_files -> agents (agent_id));
diesel::joinable!(knowledge_chunks -> knowledge_files (file_id));
diesel::allow_tables_to_appear_in_same_query!(
    agents,
    agent_runs,
    agent_run_steps,
    knowledge_files,
    knowledge_chunks,
    plans,
    organizations,
    api_keys,
    jobs,
    events,
    billing_accounts,
    quota_usage,
    reservations,
    credit_transactions,
    usage_records,
    rate_limits,
    concurrency_slots,
    webhooks,
    webhook_deliveries,
    webhook_attempts,
);

// Dashboard team members (migration dashboard_members).
diesel::table! {
    members (id) {
        id -> Uuid,
        org_id -> Uuid,
        email -> Text,
        password_hash -> Text,
        role -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    dashboard_sessions (id_hash) {
        id_hash -> Bytea,
        member_id -> Uuid,
        csrf_token -> Text,
        created_at -> Timestamptz,
        last_seen_at -> Timestamptz,
        expires_at -> Timestamptz,
    }
}

diesel::table! {
    login_failures (email) {
        email -> Text,
        failures -> Int4,
        window_started_at -> Timestamptz,
        locked_until -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(members -> organizations (org_id));
diesel::joinable!(dashboard_sessions -> members (member_id));
diesel::allow_tables_to_appear_in_same_query!(members, dashboard_sessions, organizations);

// Stored responses of the Responses API (migration responses).
diesel::table! {
    responses (id) {
        id -> Text,
        org_id -> Uuid,
        model -> Text,
        status -> Text,
        body -> Jsonb,
        input_items -> Jsonb,
        conversation -> Jsonb,
        previous_response_id -> Nullable<Text>,
        created_at -> Timestamptz,
        upstream -> Nullable<Text>,
        expires_at -> Timestamptz,
    }
}

diesel::joinable!(responses -> organizations (org_id));
diesel::allow_tables_to_appear_in_same_query!(responses, organizations);

// Voices cloned upstream per organization (migration voice_clones).
diesel::table! {
    voice_clones (org_id, model_id, sample_sha256) {
        org_id -> Uuid,
        model_id -> Text,
        sample_sha256 -> Bytea,
        voice_id -> Text,
        created_at -> Timestamptz,
        last_used_at -> Timestamptz,
    }
}
