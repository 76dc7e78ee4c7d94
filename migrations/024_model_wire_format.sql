-- A model's wire format: the upstream endpoint its provider serves it at
-- (`chat_completions`, `responses` or `messages`; docs/API.md, "Models"). Existing models
-- take their provider's: OpenAI chat completions, Anthropic messages. The Responses API
-- is OpenAI's only. Usage records of POST /v1/responses calls: endpoint `responses`.
ALTER TABLE models ADD COLUMN wire_format text
  CHECK (wire_format IN ('chat_completions', 'responses', 'messages'));
UPDATE models SET wire_format = CASE provider WHEN 'anthropic' THEN 'messages' ELSE 'chat_completions' END;
ALTER TABLE models
  ALTER COLUMN wire_format SET NOT NULL,
  ADD CONSTRAINT models_responses_openai CHECK (wire_format <> 'responses' OR provider = 'openai');

ALTER TABLE usage_records DROP CONSTRAINT usage_records_endpoint_check;
ALTER TABLE usage_records ADD CONSTRAINT usage_records_endpoint_check CHECK (endpoint IN ('chat.completions', 'messages', 'embeddings', 'responses'));
