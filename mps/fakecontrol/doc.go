// Package fakecontrol is a stand-in for nvidia-cuda-mps-control, FOR TESTS
// AND DEMOS ONLY, on machines without a GPU. It shares nothing with MPS but
// its command line: no server is started, no GPU is touched, and no limit is
// enforced. The command gpumux-fake-mps-control runs it.
//
// Like the real program, it uses CUDA_MPS_PIPE_DIRECTORY (default
// /tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps):
//
//	gpumux-fake-mps-control -d   start a daemon in a new session and return once it listens
//	gpumux-fake-mps-control -f   run the daemon in the foreground
//	gpumux-fake-mps-control      send the lines of stdin as commands, print the replies;
//	                             exit 1 with "Cannot find MPS control daemon process" if none answers
//
// The daemon listens on a unix socket named control in the pipe directory,
// writes its pid to nvidia-cuda-mps-control.pid there (as the real one does),
// logs every command it receives to control.log in the log directory
// ("Cmd:<line>", as the real one does), and keeps its state in memory:
//
//	get_server_list                              fake server pids, one per line
//	get_client_list <server pid>                 client pids, or "Server <pid> not found"
//	get_server_status <server pid>               ACTIVE, or "Server <pid> not found"
//	get_active_thread_percentage <server pid>    the server's percentage, fixed when it started
//	set_default_active_thread_percentage <p>     replies the value in force ("25.0"); an invalid p is refused, as by the real one
//	get_default_active_thread_percentage         "100.0" until set
//	set_default_device_pinned_mem_limit <d> <v>  v read as the real one reads it (mps.ParseMemLimit: 4G, 4096M; never refused); no reply
//	get_default_device_pinned_mem_limit <d>      "4G", rounded down to whole G from 1G on as by the real one (mps.DisplayMemLimit); nothing if unset or 0
//	quit                                         waits until no server has a client (as the real one does), then exits
//
// and two commands for tests: fake_add_client <pid> (connects a fake client,
// starting a fake server first if none runs; servers take the defaults in
// force when they start, as real ones do) and fake_remove_client <pid>.
// Fake server pids are above the kernel's largest pid, so they never name a
// real process. A quit that has to wait logs "quit waits for N client(s)".
package fakecontrol
