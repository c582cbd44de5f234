// Calls to the coordinator's API, with the bearer token when one was given.
//
// The page itself needs no token. Where the API does (authentication on), the first call answers
// 401, the page shows a form, and the token typed there is kept in this tab's sessionStorage
// (gone when the tab closes) and sent as "Authorization: Bearer ..." with every call.

const TOKEN_KEY = "topos.token";

// Paths are relative to the page (/ui/), so they work behind a proxy that adds a path prefix.
const API_ROOT = new URL("../", document.baseURI);

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}

// GET an API path ("v1/inventory") and return its JSON; throws ApiError with the API's message.
export async function get(path) {
  const headers = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let response;
  try {
    response = await fetch(new URL(path, API_ROOT), { headers, cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, "unreachable", `cannot reach the coordinator (${err.message})`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = (body && body.message) || `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, (body && body.error) || "error", message);
  }
  return body;
}

// The same, but a failure becomes {error} so one missing part does not blank the whole page
// (e.g. /v1/gangs answers 503 on a coordinator whose scheduler is not running).
export async function getOrError(path) {
  try {
    return { data: await get(path) };
  } catch (err) {
    if (err.status === 401) throw err; // the caller asks for a token
    return { error: err };
  }
}
