DROP TABLE responses;
