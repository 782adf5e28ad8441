// unigen dashboard: small progressive enhancements; every page works without it.
"use strict";
document.addEventListener("click", function (event) {
  // Copy buttons: <button type="button" data-copy="element-id">Copy</button>
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent.trim()).then(function () {
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 2000);
  });
});

// Forms with data-confirm="question": asked before sending.
document.addEventListener("submit", function (event) {
  var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});

// A job's page: the status follows the dashboard's event stream
// (<section id="job-live" data-events="...">); when the job finishes, the
// page reloads once to show its outputs.
(function () {
  var live = document.getElementById("job-live");
  if (!live || !window.EventSource || live.getAttribute("data-terminal") === "true") return;
  var status = document.getElementById("job-status");
  var bar = document.getElementById("job-progress");
  var text = document.getElementById("job-progress-text");
  var started = document.getElementById("job-started");
  var finished = document.getElementById("job-finished");
  var error = document.getElementById("job-error");
  var source = new EventSource(live.getAttribute("data-events"));
  source.addEventListener("status", function (message) {
    var job = JSON.parse(message.data);
    status.textContent = job.status;
    status.className = "status status-" + job.status;
    bar.value = job.progress;
    text.textContent = job.progress + "%";
    if (job.started_at) started.textContent = job.started_at;
    if (job.completed_at) finished.textContent = job.completed_at;
    if (job.error) { error.textContent = job.error; error.hidden = false; }
    if (["completed", "failed", "cancelled"].indexOf(job.status) >= 0) {
      source.close();
      window.location.reload();
    }
  });
})();
