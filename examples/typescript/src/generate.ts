// Image generation with the official OpenAI SDK: sync, then async with a
// long poll, then a video followed on its job event stream.
//
//   export OPENAI_BASE_URL=http://127.0.0.1:8080/api/v1 OPENAI_API_KEY=sk_...
//   npm ci && npm run build && node dist/generate.js
import OpenAI from "openai";

const client = new OpenAI(); // reads OPENAI_BASE_URL and OPENAI_API_KEY

function fail(message: string): never {
  console.error(message);
  process.exit(1);
}

// Sync: the answer comes when the image is ready. `dall-e-3` is an alias of
// the built-in procedural renderer (not a text-to-image model).
const result = await client.images.generate({ model: "dall-e-3", prompt: "a lighthouse at dusk", size: "1024x1024" });
const url = result.data?.[0]?.url ?? fail("no image URL");
const png = new Uint8Array(await (await fetch(url)).arrayBuffer());
if (png[0] !== 0x89 || png[1] !== 0x50) fail("not a PNG");
console.log(`sync: ${url} (${png.length} bytes)`);

// Async: 202 at once with the job; a long poll answers when it finishes
// (or after at most 30 s with the job as it is then). The SDK's generic
// post/get call unigen's own routes with the same base URL, key and retries.
interface Job {
  id: string;
  status: string;
  progress: number;
  errorMessage?: string | null;
  outputData?: any;
}
let job = (await client.post("/images/generations", {
  body: { prompt: "a red fox in the snow", size: "512x512" },
  query: { async: "true" },
})) as Job;
console.log(`async: submitted ${job.id}`);
while (job.status === "pending" || job.status === "processing") {
  job = (await client.get(`/jobs/${job.id}`, { query: { poll: "true" } })) as Job;
  console.log(`async: ${job.status} ${job.progress}%`);
}
if (job.status !== "completed") fail(`the job ended ${job.status}: ${job.errorMessage}`);
console.log(`async: ${job.outputData.images[0].url}`);

// The job event stream (server-sent events): the job's state at once, then
// one event per change, ending after the terminal one.
let video = (await client.post("/videos/generations", {
  body: { prompt: "waves at sunset", duration_seconds: 2 },
  query: { async: "true" },
})) as Job;
const stream = await fetch(`${client.baseURL.replace(/\/$/, "")}/jobs/${video.id}/events`, {
  headers: { Authorization: `Bearer ${client.apiKey}` },
});
if (!stream.ok || !stream.body) fail(`event stream: HTTP ${stream.status}`);
const decoder = new TextDecoder();
let buffer = "";
for await (const chunk of stream.body as unknown as AsyncIterable<Uint8Array>) {
  buffer += decoder.decode(chunk, { stream: true });
  let end: number;
  while ((end = buffer.indexOf("\n\n")) >= 0) {
    const block = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    const data = block.split("\n").find((line) => line.startsWith("data:"));
    if (!data) continue; // a keep-alive comment
    video = JSON.parse(data.slice(5)) as Job;
    console.log(`events: ${video.status} ${video.progress}%`);
  }
}
if (video.status !== "completed") fail(`the video ended ${video.status}`);
console.log(`events: ${video.outputData.video.url}`);
