DROP TABLE voice_clones;
