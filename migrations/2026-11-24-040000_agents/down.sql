DROP TABLE agents;
