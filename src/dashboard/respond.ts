/** How page handlers answer: a screen, or an action's outcome on its screen. */
import type { Request, Response } from 'express';
import { ApiError } from '../errors/catalogue.js';
import type { PageContext } from './context.js';
import type { Html } from './html.js';
import { errorNotice, type Notice } from './layout.js';

/** Page handlers get the request, the response and the member's context. */
export type PageHandler = (req: Request, res: Response, ctx: PageContext) => Promise<void>;

export interface PageRouter {
  get(path: string, handler: PageHandler): void;
  post(path: string, handler: PageHandler): void;
}

/**
 * Answers a POST with its screen: `act` returns what was done; an ApiError (a refusal of
 * the API, with its status and message) is shown on the same screen instead.
 */
export async function answerAction(
  res: Response,
  act: () => Promise<Notice>,
  screen: (notice: Notice, failed: boolean) => Promise<Html>,
  canonicalPath: string | (() => string),
): Promise<void> {
  let notice: Notice;
  let status = 200;
  try {
    notice = await act();
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    notice = errorNotice(err);
    status = err.status;
  }
  // htmx keeps the screen's address in the location bar instead of the action's.
  res.setHeader('HX-Push-Url', typeof canonicalPath === 'string' ? canonicalPath : canonicalPath());
  res.status(status).type('html').send(String(await screen(notice, status !== 200)));
}

export function sendPage(res: Response, page: Html, status = 200): void {
  res.status(status).type('html').send(String(page));
}
