DROP TABLE knowledge_chunks;
DROP TABLE knowledge_files;
