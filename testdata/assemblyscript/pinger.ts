// pinger.ts consumes the queue "as-pings" ({"url": string}): per task it GETs the url
// once. When the host's egress gate did not admit the request (RateLimited: nothing was
// sent), it hands the task back after the wait the host named, with the reason
// "rate limited: retry after Nms" (tests/cguest_test.go reads N back); any other error,
// or a status other than 200, fails the task.
import { done, fail, field, httpRequest, lastError, lastKind, lastWaitMs, output, readTask, retry, unquote } from "../../guest-sdk/assemblyscript/index";

export function fleet_describe(): i32 {
  return output('{"abi_version":1,"type":"pinger","version":"1.0.0","mode":"batch",' +
    '"consumes":{"name":"as-pings","payload_schema":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}}}');
}

export function fleet_handle(): i32 {
  const task = readTask();
  const url = unquote(field(task.payload, "url")!);
  const res = httpRequest("GET", url);
  if (res === null) {
    if (lastKind() == "RateLimited") {
      const wait = lastWaitMs();
      return retry(wait, "rate limited: retry after " + wait.toString() + "ms");
    }
    return fail("http: " + lastError);
  }
  if (res.status != 200) {
    return fail("http: GET " + url + ": status " + res.status.toString() + " " + res.error);
  }
  return done();
}
