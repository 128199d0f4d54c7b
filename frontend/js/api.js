// The REST API under /api: the token (this tab's session only), the role, JSON errors.

const KEY = "penumbra.token";
const RANK = { viewer: 1, analyst: 2, admin: 3 };

export const session = {
  token: sessionStorage.getItem(KEY),
  me: null, // {id, role, label}
  save(token) { this.token = token; sessionStorage.setItem(KEY, token); },
  clear() { this.token = null; this.me = null; sessionStorage.removeItem(KEY); },
  /** Whether the signed-in role is at least ``role``. */
  can(role) { return !!this.me && RANK[this.me.role] >= RANK[role]; },
};

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body?.error ?? {};
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.detail = detail;
  }
}

/** Listeners told when the token stops being accepted (401). */
const unauthorized = new Set();
export function onUnauthorized(listener) { unauthorized.add(listener); }

/** ``api("GET", "/queries")``: the parsed JSON answer, or throws ApiError. */
export async function api(method, path, body, { token = session.token, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(`/api${path}`, {
      method, headers, signal, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, { error: { message: "the service cannot be reached" } });
  }
  if (response.status === 204) return null;
  const parsed = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && token === session.token) unauthorized.forEach((f) => f());
    throw new ApiError(response.status, parsed);
  }
  return parsed;
}

export const get = (path, options) => api("GET", path, undefined, options);
export const post = (path, body, options) => api("POST", path, body, options);
export const patch = (path, body, options) => api("PATCH", path, body, options);
export const del = (path, options) => api("DELETE", path, undefined, options);

/** ``/queries/<id>`` with the id escaped. */
export const q = (id) => `/queries/${encodeURIComponent(id)}`;
