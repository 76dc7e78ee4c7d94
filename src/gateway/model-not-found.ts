/**
 * The 404 model_not_found of a gateway call: it names the model asked for, lists the
 * project's active models (the first `listed_models_max`, then how many more) and, when one
 * of them is a near spelling of it, suggests that one (also in `error.suggested_model`).
 * Built only after the model lookup found nothing: a call to a known model pays nothing
 * for it. Near is an edit distance (optimal string alignment: insertions, deletions,
 * substitutions and swaps of two neighbours, case ignored) of at most a quarter of the
 * asked id's length, and at least 1.
 */
import { ApiError } from '../errors/catalogue.js';
import { model_id_chars_max } from '../admin/models.js';

/** Models the message lists by id, at most; the rest are counted. */
const listed_models_max = 20;

/**
 * The optimal string alignment distance of `a` and `b` (Damerau-Levenshtein where no
 * substring is edited twice), or `limit + 1` as soon as it must exceed `limit`.
 */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let before = new Array<number>(b.length + 1).fill(0);
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2] + 1);
      current.push(d);
      rowMin = Math.min(rowMin, d);
    }
    if (rowMin > limit) return limit + 1;
    [before, previous] = [previous, current];
  }
  return previous[b.length];
}

/** The id of `ids` nearest to `asked` within the threshold (the first of equals), or null. */
export function closestModelId(asked: string, ids: readonly string[]): string | null {
  if (asked.length === 0 || asked.length > model_id_chars_max) return null;
  const wanted = asked.toLowerCase();
  let best: string | null = null;
  let bestDistance = Math.max(1, Math.floor(asked.length / 4));
  for (const id of ids) {
    const d = editDistance(wanted, id.toLowerCase(), bestDistance);
    if (d < bestDistance || (d === bestDistance && best === null)) {
      best = id;
      bestDistance = d;
    }
  }
  return best;
}

/** `ids` as the message lists them: the first listed_models_max, and how many more. */
function listed(ids: readonly string[]): string {
  if (ids.length <= listed_models_max) return ids.join(', ');
  return `${ids.slice(0, listed_models_max).join(', ')} and ${ids.length - listed_models_max} more`;
}

/**
 * The 404 of a call to `asked`, which the project has not (or has, but inactive:
 * `inactive`). `activeIds` are the active models the caller may use, sorted.
 */
export function modelNotFound(asked: string, activeIds: readonly string[], inactive: boolean): ApiError {
  const shown = asked.length > model_id_chars_max ? `${asked.slice(0, model_id_chars_max)}...` : asked;
  const suggestion = closestModelId(asked, activeIds);
  const what = inactive ? `model ${shown} is inactive in this project` : `model ${shown} not found in this project`;
  const hint = suggestion === null ? '.' : `; did you mean \`${suggestion}\`?`;
  const models = activeIds.length === 0
    ? ' It has no active models.'
    : ` Its active models: ${listed(activeIds)} (GET /v1/models lists them).`;
  return new ApiError('model_not_found', { param: 'model', message: `${what}${hint}${models}`, extra: { suggested_model: suggestion } });
}
