-- Which Redis key prefix serves which project (src/redis/generation.ts). The persist loop
-- records a project here before it writes the project's first entries, so that when a
-- Redis comes back without recent writes, the recovery knows which customers of the
-- ledger this prefix serves: several prefixes (the tests, one per file) share one
-- database, and a customer of another prefix is never "behind" in this one.
CREATE TABLE redis_prefix_projects (
  prefix      text NOT NULL,
  project_id  text NOT NULL,
  recorded_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (prefix, project_id)
);
