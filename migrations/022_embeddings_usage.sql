-- Usage records of POST /v1/embeddings calls: their endpoint is `embeddings`.

ALTER TABLE usage_records DROP CONSTRAINT usage_records_endpoint_check;
ALTER TABLE usage_records ADD CONSTRAINT usage_records_endpoint_check CHECK (endpoint IN ('chat.completions', 'messages', 'embeddings'));
