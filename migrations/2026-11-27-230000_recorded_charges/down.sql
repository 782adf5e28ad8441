DROP TABLE recorded_charges;
