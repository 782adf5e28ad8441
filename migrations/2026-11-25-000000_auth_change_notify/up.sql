-- API processes cache verified keys (with their organization and plan) for
-- a few seconds. Any change to those rows, by the API, the admin commands
-- or an operator in psql, tells every process to drop its cache at once.
CREATE FUNCTION unigen_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('unigen_auth', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_auth_changed AFTER UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();
CREATE TRIGGER organizations_auth_changed AFTER UPDATE OR DELETE ON organizations
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();
CREATE TRIGGER plans_auth_changed AFTER UPDATE OR DELETE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();
