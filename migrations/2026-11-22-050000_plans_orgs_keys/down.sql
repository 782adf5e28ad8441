DROP TABLE api_keys;
DROP TABLE organizations;
DROP TABLE plans;
