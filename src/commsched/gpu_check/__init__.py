"""``make gpu-check`` (issue 31): the checks that need a GPU, in one command of bounded time.

:mod:`commsched.gpu_check.driver` runs the steps and writes the results (torch-free);
:mod:`commsched.gpu_check.steps` holds the workers that use torch, CUDA and NCCL, each run in a process
of its own; :mod:`commsched.gpu_check.nccl_log` reads NCCL's debug log; :mod:`commsched.gpu_check.copy_kernel`
is the communication-like kernel of the contention probe on NCCLs older than 2.30. Run it as
``PYTHONPATH=src python3 -m commsched.gpu_check OUT`` (what ``make gpu-check OUT=dir`` does).
"""
