DROP TRIGGER plans_auth_changed ON plans;
DROP TRIGGER organizations_auth_changed ON organizations;
DROP TRIGGER api_keys_auth_changed ON api_keys;
DROP FUNCTION unigen_auth_changed();
