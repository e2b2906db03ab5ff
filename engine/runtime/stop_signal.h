// SIGINT, SIGTERM and SIGUSR1 ask a run to stop after the step in flight: it checkpoints and
// exits cleanly. SIGUSR1 is the one launchers use: mpirun forwards it to every rank and goes on
// (SIGINT or SIGTERM to mpirun ends the job), and Slurm's scancel --signal=USR1 delivers it. A
// second signal gets the default behaviour, so a stuck run can still be killed.
#pragma once

namespace shardscope {

// While one exists, SIGINT, SIGTERM and SIGUSR1 request a stop; the handlers before it come back
// after.
class StopSignalHandlers {
public:
    StopSignalHandlers();
    ~StopSignalHandlers();
    StopSignalHandlers(const StopSignalHandlers&) = delete;
    StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;

private:
    void (*previousInt_)(int);
    void (*previousTerm_)(int);
    void (*previousUsr1_)(int);
};

int stopSignal();             // the signal that asked to stop, 0 if none
void requestStop(int signal); // what the handlers do; tests and embedders may call it
void clearStopRequest();

} // namespace shardscope
