// Simulation-only wrapper for RegionSweeper (rtl/update.py): two stores and a command list.
//
// Holds a parameter store and a gradient store (synchronous read with enable, read data held
// while the enable is low, reading a word being written returns the old word: the timing of
// amaranth.lib.memory with transparent_for=()), loads them with $readmemh, runs a list of
// sweep commands one after another and dumps both stores and a status word per command, so
// that no Python runs on the per-cycle path: cocotb only resets, pulses `start` and awaits
// `done`.
//
// The DUT module name comes from the `DUT` macro. Its ports are Amaranth's: clk, rst, start,
// base, length, lr, busy, done, error, param_r__{en,addr,data}, param_w__{en,addr,data},
// grad_r__{en,addr,data}, grad_w__{en,addr,data}.
//
// Plusargs:
//   +PARAMS=<file> +GRADS=<file>          initial store images (one 32-bit word per line)
//   +COMMANDS=<file>                      one 96-bit word per command: {lr, length, base}
//   +NCMD=<n>                             number of commands (1 .. MAX_CMD)
//   +OUT_PARAMS=<file> +OUT_GRADS=<file>  final store images
//   +OUT_STATUS=<file>                    one 64-bit word per command: {cycles, 31'b0, error}
//                                         (cycles from the start cycle to the done pulse)
`ifndef DUT
`define DUT region_sweeper
`endif

module update_sweep_tb #(
    parameter integer PDEPTH = 1024,
    parameter integer GDEPTH = 1024,
    parameter integer MAX_CMD = 64
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    output reg         done,
    output reg  [31:0] commands_run,
    output reg  [31:0] protocol_errors
);
    localparam integer PAW = $clog2(PDEPTH);
    localparam integer GAW = $clog2(GDEPTH);
    localparam integer MAXD = PDEPTH > GDEPTH ? PDEPTH : GDEPTH;
    localparam integer LW = $clog2(MAXD + 1);

    reg [31:0] pmem [0:PDEPTH-1];
    reg [31:0] gmem [0:GDEPTH-1];
    reg [95:0] commands [0:MAX_CMD-1];
    reg [63:0] status [0:MAX_CMD-1];

    reg [8*1024-1:0] params_file, grads_file, commands_file;
    reg [8*1024-1:0] out_params_file, out_grads_file, out_status_file;
    integer ncmd;

    initial begin
        if (!$value$plusargs("PARAMS=%s", params_file)) $fatal(1, "missing +PARAMS=");
        if (!$value$plusargs("GRADS=%s", grads_file)) $fatal(1, "missing +GRADS=");
        if (!$value$plusargs("COMMANDS=%s", commands_file)) $fatal(1, "missing +COMMANDS=");
        if (!$value$plusargs("NCMD=%d", ncmd)) $fatal(1, "missing +NCMD=");
        if (!$value$plusargs("OUT_PARAMS=%s", out_params_file)) $fatal(1, "missing +OUT_PARAMS=");
        if (!$value$plusargs("OUT_GRADS=%s", out_grads_file)) $fatal(1, "missing +OUT_GRADS=");
        if (!$value$plusargs("OUT_STATUS=%s", out_status_file)) $fatal(1, "missing +OUT_STATUS=");
        if (ncmd < 1 || ncmd > MAX_CMD) $fatal(1, "+NCMD=%0d outside 1..%0d", ncmd, MAX_CMD);
        $readmemh(params_file, pmem);
        $readmemh(grads_file, gmem);
        $readmemh(commands_file, commands, 0, ncmd - 1);
    end

    wire           busy, sw_done, error;
    wire           p_r_en, p_w_en, g_r_en, g_w_en;
    wire [PAW-1:0] p_r_addr, p_w_addr;
    wire [GAW-1:0] g_r_addr, g_w_addr;
    wire [31:0]    p_w_data, g_w_data;
    reg  [31:0]    p_r_data, g_r_data;

    reg            sw_start;
    reg  [31:0]    cmd_idx;
    wire [95:0]    cmd = commands[cmd_idx[$clog2(MAX_CMD)-1:0]];

    `DUT dut (
        .clk(clk),
        .rst(rst),
        .start(sw_start),
        .base(cmd[LW-1:0]),
        .length(cmd[32+LW-1:32]),
        .lr(cmd[95:64]),
        .busy(busy),
        .done(sw_done),
        .error(error),
        .param_r__en(p_r_en), .param_r__addr(p_r_addr), .param_r__data(p_r_data),
        .param_w__en(p_w_en), .param_w__addr(p_w_addr), .param_w__data(p_w_data),
        .grad_r__en(g_r_en), .grad_r__addr(g_r_addr), .grad_r__data(g_r_data),
        .grad_w__en(g_w_en), .grad_w__addr(g_w_addr), .grad_w__data(g_w_data)
    );

    always @(posedge clk) begin
        if (p_r_en) p_r_data <= pmem[p_r_addr];
        if (p_w_en) pmem[p_w_addr] <= p_w_data;
        if (g_r_en) g_r_data <= gmem[g_r_addr];
        if (g_w_en) gmem[g_w_addr] <= g_w_data;
    end

    // Command runner: pulse the sweeper's start, count cycles until its done pulse, record
    // the status, wait two idle cycles, next command. Writes outside a store's range and a
    // start pulse while busy count as protocol errors.
    localparam [1:0] S_IDLE = 2'd0, S_START = 2'd1, S_WAIT = 2'd2, S_DUMP = 2'd3;
    reg [1:0]  state;
    reg [31:0] count;
    reg [1:0]  pause;

    always @(posedge clk) begin
        if (rst) begin
            state <= S_IDLE;
            sw_start <= 1'b0;
            cmd_idx <= 0;
            count <= 0;
            pause <= 0;
            done <= 1'b0;
            commands_run <= 0;
            protocol_errors <= 0;
        end else begin
            sw_start <= 1'b0;
            if ((p_w_en && {1'b0, p_w_addr} >= PDEPTH[PAW:0]) ||
                (g_w_en && {1'b0, g_w_addr} >= GDEPTH[GAW:0]) || (sw_start && busy))
                protocol_errors <= protocol_errors + 1;
            // A base or length wider than the sweeper's ports would be silently truncated.
            if (state == S_START && ((|cmd[63:32+LW]) || (|cmd[31:LW])))
                $fatal(1, "command %0d: base/length do not fit in %0d bits", cmd_idx, LW);
            case (state)
                S_IDLE: if (start) state <= S_START;
                S_START: begin
                    if (pause != 0) begin
                        pause <= pause - 1;
                    end else begin
                        sw_start <= 1'b1;
                        count <= 0;
                        state <= S_WAIT;
                    end
                end
                S_WAIT: begin
                    count <= count + 1;
                    if (sw_done) begin
                        status[cmd_idx[$clog2(MAX_CMD)-1:0]] <= {count, 31'd0, error};
                        commands_run <= commands_run + 1;
                        cmd_idx <= cmd_idx + 1;
                        pause <= 2'd2;
                        state <= (cmd_idx + 1 == ncmd) ? S_DUMP : S_START;
                    end
                end
                S_DUMP: if (!done) begin
                    $writememh(out_params_file, pmem);
                    $writememh(out_grads_file, gmem);
                    $writememh(out_status_file, status, 0, ncmd - 1);
                    done <= 1'b1;
                end
            endcase
        end
    end
endmodule
