DROP TABLE login_failures;
DROP TABLE dashboard_sessions;
DROP TABLE members;
