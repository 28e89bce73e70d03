// The API client: the token, conditional GETs (ETag / 304) so polling costs little,
// and errors as Error objects carrying the server's message and status.

const TOKEN_KEY = "trainyard.token";
const cache = new Map();  // url -> {etag, data}

// A token in the address (#token=... or ...&token=...) is kept and removed from the
// address bar: `trainyard up` prints such a link.
export function takeTokenFromLocation() {
  const h = location.hash;
  const m = /[#&?]token=([^&]+)/.exec(h);
  if (!m) return;
  setToken(decodeURIComponent(m[1]));
  const rest = h.replace(/[#&?]token=[^&]+/, "").replace(/^#?&/, "#");
  history.replaceState(null, "", location.pathname + location.search + (rest && rest !== "#" ? rest : "#/cluster"));
}

export function token() {
  try { return localStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}
export function setToken(t) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t);
    else localStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts for this page */ }
  cache.clear();
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body, opts = {}) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const url = path.startsWith("/") ? path : `/api/v1/${path}`;
  const cached = method === "GET" ? cache.get(url) : undefined;
  if (cached && cached.etag) headers["If-None-Match"] = cached.etag;
  if (body !== undefined) headers["Content-Type"] = opts.contentType || "application/json";
  let res;
  try {
    res = await fetch(url, {
      method, headers, cache: "no-store",
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      signal: opts.signal,
    });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, `cannot reach the server (${e.message})`);
  }
  if (res.status === 304 && cached) return cached.data;
  if (!res.ok) {
    let message = `HTTP ${res.status}`;
    try {
      const j = await res.json();
      if (j && j.error) message = j.error;
    } catch { /* not JSON */ }
    throw new ApiError(res.status, message);
  }
  let data;
  if (opts.raw) {
    data = { text: await res.text(), headers: res.headers };
  } else {
    data = await res.json();
  }
  const etag = res.headers.get("ETag");
  if (method === "GET" && etag && !opts.raw) {
    cache.set(url, { etag, data });
    if (cache.size > 500) cache.delete(cache.keys().next().value);
  }
  return data;
}

export const get = (path, opts) => request("GET", path, undefined, opts);
export const post = (path, body, opts) => request("POST", path, body ?? "", opts);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
