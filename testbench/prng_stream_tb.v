// Simulation-only bench for PRNGUnit (rtl/prng.py): commands in with random gaps, beats out
// under random back-pressure, a checksum per command, and no Python on the per-cycle path
// (cocotb, testbench/prng_cocotb.py, only resets, raises `start` and awaits `done`).
//
// The DUT module name comes from the `DUT` macro; LANES must match the unit's lanes. Ports are
// Amaranth's: clk, rst, cmd__payload ({count, base, seed}, 96 bits), cmd__valid, cmd__ready,
// o__payload ({last, data[LANES-1], ..., data[0]}), o__valid, o__ready.
//
// Plusargs:
//   +COMMANDS=<file>  $readmemh file, one 96-bit command per line: {count, base, seed}
//   +NCMD=<n>         commands in the file (1 .. MAXCMD)
//   +BEATS=<n>        total beats the commands ask for (the bench stops after the last one)
//   +RESULTS=<file>   $writememh file: one 96-bit line per command that emitted beats, in
//                     order: {beats, checksum}; checksum = fold of h = h * M + word (mod 2**64)
//                     over the command's words, lane 0 first (ttrain.golden.prng.stream_checksum)
//   +DUMP=<file>      $writememh file of the first DUMPBEATS beats' words (lane 0 first)
//   +GAP=<k>          cmd idle probability k/16 per cycle (0 .. 15, default 4)
//   +STALL=<k>        o__ready low with probability k/16 per cycle (0 .. 15, default 6)
//
// Counted: protocol_errors (a stalled beat that changed or vanished), results_seen (beats
// taken), cycles (from `start` to the last beat).
`ifndef DUT
`define DUT prng_unit
`endif

module prng_stream_tb #(
    parameter integer LANES = 8,
    parameter integer MAXCMD = 4096,
    parameter integer DUMPBEATS = 256
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    output reg         done,
    output reg  [31:0] protocol_errors,
    output reg  [31:0] results_seen,
    output reg  [31:0] cycles
);
    localparam integer CW = $clog2(MAXCMD);
    localparam integer OW = 32 * LANES + 1;
    localparam [63:0] MULT = 64'h9E3779B97F4A7C15;

    reg [95:0] commands [0:MAXCMD-1];
    reg [95:0] results  [0:MAXCMD-1];
    reg [31:0] dump     [0:DUMPBEATS*LANES-1];

    reg [8*1024-1:0] commands_file;
    reg [8*1024-1:0] results_file;
    reg [8*1024-1:0] dump_file;
    integer ncmd;
    integer beats;
    integer gap;
    integer stall;

    initial begin
        if (!$value$plusargs("COMMANDS=%s", commands_file)) $fatal(1, "missing +COMMANDS=");
        if (!$value$plusargs("RESULTS=%s", results_file)) $fatal(1, "missing +RESULTS=");
        if (!$value$plusargs("DUMP=%s", dump_file)) $fatal(1, "missing +DUMP=");
        if (!$value$plusargs("NCMD=%d", ncmd)) $fatal(1, "missing +NCMD=");
        if (!$value$plusargs("BEATS=%d", beats)) $fatal(1, "missing +BEATS=");
        if (!$value$plusargs("GAP=%d", gap)) gap = 4;
        if (!$value$plusargs("STALL=%d", stall)) stall = 6;
        if (ncmd < 1 || ncmd > MAXCMD) $fatal(1, "+NCMD=%0d outside 1..%0d", ncmd, MAXCMD);
        if (beats < 1) $fatal(1, "+BEATS=%0d: the commands must ask for at least one beat",
                              beats);
        if (gap < 0 || gap > 15) $fatal(1, "+GAP=%0d outside 0..15", gap);
        if (stall < 0 || stall > 15) $fatal(1, "+STALL=%0d outside 0..15", stall);
        $readmemh(commands_file, commands, 0, ncmd - 1);
    end

    // Two independent 32-bit Galois LFSRs: command gaps and output stalls.
    reg  [31:0] lfsr_in;
    reg  [31:0] lfsr_out;
    wire [31:0] lfsr_in_next = {1'b0, lfsr_in[31:1]} ^ (lfsr_in[0] ? 32'h80200003 : 32'h0);
    wire [31:0] lfsr_out_next = {1'b0, lfsr_out[31:1]} ^ (lfsr_out[0] ? 32'h80200003 : 32'h0);

    // Source: once a command is offered it stays offered (same payload) until accepted.
    reg          running;
    reg          finishing;
    reg  [CW:0]  in_idx;
    reg          in_valid;
    wire         in_ready;
    wire [95:0]  cur = commands[in_idx[CW-1:0]];
    wire         in_fire = in_valid && in_ready;
    wire         more = (in_fire ? in_idx + 1 : in_idx) < ncmd[CW:0];
    wire         idle = {28'd0, lfsr_in[3:0]} < gap[31:0];

    wire [OW-1:0] out_payload;
    wire          out_valid;
    wire          out_ready = running && ({28'd0, lfsr_out[3:0]} >= stall[31:0]);
    wire          out_fire = out_valid && out_ready;
    wire          out_last = out_payload[OW-1];

    `DUT dut (
        .clk(clk),
        .rst(rst),
        .cmd__payload(in_valid ? cur : {lfsr_in, lfsr_out, lfsr_in}),   // garbage when idle
        .cmd__valid(in_valid),
        .cmd__ready(in_ready),
        .o__payload(out_payload),
        .o__valid(out_valid),
        .o__ready(out_ready)
    );

    // Checksum of the beat on the output, folded onto the running one.
    reg  [63:0] h;
    reg  [63:0] h_next;
    integer     j;
    always @* begin
        h_next = h;
        for (j = 0; j < LANES; j = j + 1)
            h_next = h_next * MULT + {32'd0, out_payload[32*j +: 32]};
    end

    reg          was_stalled;
    reg [OW-1:0] stalled_payload;
    reg [31:0]   cmd_beats;
    reg [CW:0]   out_cmd;

    always @(posedge clk) begin
        if (rst) begin
            running <= 1'b0;
            in_idx <= 0;
            in_valid <= 1'b0;
            lfsr_in <= 32'hACE1_2468;
            lfsr_out <= 32'h1357_BDF1;
            was_stalled <= 1'b0;
            stalled_payload <= {OW{1'b0}};
            protocol_errors <= 0;
            results_seen <= 0;
            cycles <= 0;
            h <= 64'd0;
            cmd_beats <= 0;
            out_cmd <= 0;
        end else if (!done && !finishing) begin
            if (start) running <= 1'b1;
            if (running) cycles <= cycles + 1;
            lfsr_in <= lfsr_in_next;
            lfsr_out <= lfsr_out_next;
            if (in_fire) in_idx <= in_idx + 1;
            if (running && (!in_valid || in_ready)) in_valid <= more && !idle;
            if (was_stalled && (!out_valid || out_payload != stalled_payload))
                protocol_errors <= protocol_errors + 1;
            was_stalled <= out_valid && !out_ready;
            stalled_payload <= out_payload;
            if (out_fire) begin
                results_seen <= results_seen + 1;
                if (results_seen < DUMPBEATS)
                    for (j = 0; j < LANES; j = j + 1)
                        dump[results_seen * LANES + j] <= out_payload[32*j +: 32];
                if (out_last) begin
                    results[out_cmd[CW-1:0]] <= {cmd_beats + 1, h_next};
                    out_cmd <= out_cmd + 1;
                    h <= 64'd0;
                    cmd_beats <= 0;
                end else begin
                    h <= h_next;
                    cmd_beats <= cmd_beats + 1;
                end
            end
        end
    end

    // Last beat taken at this edge: dump at the next edge, then raise `done`.
    always @(posedge clk) begin
        if (rst) begin
            finishing <= 1'b0;
            done <= 1'b0;
        end else if (!done && !finishing && out_fire && (results_seen + 1 == beats[31:0])) begin
            finishing <= 1'b1;
        end else if (finishing && !done) begin
            $writememh(results_file, results, 0, out_cmd == 0 ? 0 : out_cmd - 1);
            $writememh(dump_file, dump, 0,
                       (results_seen < DUMPBEATS ? results_seen : DUMPBEATS) * LANES - 1);
            done <= 1'b1;
        end
    end
endmodule
