DROP FUNCTION unigen_reserve_more(uuid, bigint);
DROP TABLE agent_run_steps;
DROP TABLE agent_runs;
