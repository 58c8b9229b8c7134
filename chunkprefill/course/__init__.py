"""Everything only the course uses: pictures (``plots``), interactive panels (``panels``),
exercise checkers (``exercises``), the workloads the notebooks run (``scenarios``), probes
that look inside a run (``probes``), source excerpts (``source``) and vLLM's recorded
schedules beside ours (``vs_vllm``). Imports the core, ``sim`` and ``lab``; nothing in the
package imports it."""
