// Simulation-only streaming wrapper for IntUpdatePipeline (rtl/update.py), with back-pressure.
// Same scheme as update_stream_tb.v, integer operands.
//
// Plays a file of (theta, grad, lr) triples into the pipeline's valid/ready input with
// pseudo-random idle cycles, drives o__ready low pseudo-randomly, collects every accepted
// result into a memory and dumps it, so that no Python runs on the per-cycle path: cocotb
// only resets, pulses `start` and awaits `done`.
//
// The DUT module name comes from the `DUT` macro. Its ports are Amaranth's: clk, rst,
// i__payload ({grad, theta}), i__valid, i__ready, lr_mult, shift, o__payload ({grad, theta}),
// o__valid, o__ready. Widths come from the parameters BITS, GRAD_BITS, MULT_BITS.
//
// Plusargs:
//   +OPERANDS=<file>  $readmemh file, one 128-bit word per line: {shift, lr_mult, grad, theta},
//                     32 bits each (two's complement, only the low bits of each field are used)
//   +RESULTS=<file>   $writememh file written when all results are in: o__payload
//   +PAIRS=<n>        number of triples (1 .. DEPTH)
//   +GAP=<k>          input idle probability k/16 per cycle (0 .. 15, default 4)
//   +STALL=<k>        o__ready low with probability k/16 per cycle (0 .. 15, default 6)
//
// Checked every cycle and counted in `protocol_errors`: a stalled output beat (valid and not
// ready) must stay valid with the same payload in the next cycle. While no pair is offered
// `lr_mult` and `shift` are driven with garbage (sampled only with an accepted pair).
`ifndef DUT
`define DUT int_update_pipeline
`endif

module update_int_stream_tb #(
    parameter integer DEPTH = 65536,
    parameter integer BITS = 8,
    parameter integer GRAD_BITS = 32,
    parameter integer MULT_BITS = 16
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    output reg         done,
    output reg  [31:0] protocol_errors,
    output reg  [31:0] results_seen,
    output reg  [31:0] cycles
);
    localparam integer AW = $clog2(DEPTH);
    localparam integer PW = BITS + GRAD_BITS;
    localparam integer SW = $clog2(GRAD_BITS + MULT_BITS);

    reg [127:0]  operands [0:DEPTH-1];
    reg [PW-1:0] results  [0:DEPTH-1];

    reg [8*1024-1:0] operands_file;
    reg [8*1024-1:0] results_file;
    integer pairs;
    integer gap;
    integer stall;

    initial begin
        if (!$value$plusargs("OPERANDS=%s", operands_file)) $fatal(1, "missing +OPERANDS=");
        if (!$value$plusargs("RESULTS=%s", results_file)) $fatal(1, "missing +RESULTS=");
        if (!$value$plusargs("PAIRS=%d", pairs)) $fatal(1, "missing +PAIRS=");
        if (!$value$plusargs("GAP=%d", gap)) gap = 4;
        if (!$value$plusargs("STALL=%d", stall)) stall = 6;
        if (pairs < 1 || pairs > DEPTH) $fatal(1, "+PAIRS=%0d outside 1..%0d", pairs, DEPTH);
        if (gap < 0 || gap > 15) $fatal(1, "+GAP=%0d outside 0..15", gap);
        if (stall < 0 || stall > 15) $fatal(1, "+STALL=%0d outside 0..15", stall);
        $readmemh(operands_file, operands, 0, pairs - 1);
    end

    // Two independent 32-bit Galois LFSRs: input gaps and output stalls.
    reg  [31:0] lfsr_in;
    reg  [31:0] lfsr_out;
    wire [31:0] lfsr_in_next = {1'b0, lfsr_in[31:1]} ^ (lfsr_in[0] ? 32'h80200003 : 32'h0);
    wire [31:0] lfsr_out_next = {1'b0, lfsr_out[31:1]} ^ (lfsr_out[0] ? 32'h80200003 : 32'h0);

    // Source: once a triple is offered it stays offered (same payload) until accepted.
    reg         running;
    reg         finishing;
    reg  [AW:0] in_idx;
    reg         in_valid;
    wire        in_ready;
    // Only the low BITS / GRAD_BITS / MULT_BITS / SW bits of the four 32-bit fields are used.
    /* verilator lint_off UNUSEDSIGNAL */
    wire [127:0] cur = operands[in_idx[AW-1:0]];
    /* verilator lint_on UNUSEDSIGNAL */
    wire        in_fire = in_valid && in_ready;
    wire        more = (in_fire ? in_idx + 1 : in_idx) < pairs[AW:0];
    wire        idle = {28'd0, lfsr_in[3:0]} < gap[31:0];

    wire [PW-1:0] out_payload;
    wire        out_valid;
    wire        out_ready = running && ({28'd0, lfsr_out[3:0]} >= stall[31:0]);
    wire        out_fire = out_valid && out_ready;

    `DUT dut (
        .clk(clk),
        .rst(rst),
        .i__payload(in_valid ? {cur[32+GRAD_BITS-1:32], cur[BITS-1:0]} : {PW{1'b1}}),
        .i__valid(in_valid),
        .i__ready(in_ready),
        .lr_mult(in_valid ? cur[64+MULT_BITS-1:64] : lfsr_in[MULT_BITS-1:0]),
        .shift(in_valid ? cur[96+SW-1:96] : lfsr_out[SW-1:0]),
        .o__payload(out_payload),
        .o__valid(out_valid),
        .o__ready(out_ready)
    );

    reg         was_stalled;
    reg  [PW-1:0] stalled_payload;
    reg  [AW:0] out_idx;

    always @(posedge clk) begin
        if (rst) begin
            running <= 1'b0;
            in_idx <= 0;
            in_valid <= 1'b0;
            out_idx <= 0;
            lfsr_in <= 32'hACE1_2468;
            lfsr_out <= 32'h1357_BDF1;
            was_stalled <= 1'b0;
            stalled_payload <= {PW{1'b0}};
            protocol_errors <= 0;
            results_seen <= 0;
            cycles <= 0;
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
                results[out_idx[AW-1:0]] <= out_payload;
                out_idx <= out_idx + 1;
                results_seen <= results_seen + 1;
            end
        end
    end

    // Last result written at this edge: dump the memory at the next edge, then raise `done`.
    always @(posedge clk) begin
        if (rst) begin
            finishing <= 1'b0;
            done <= 1'b0;
        end else if (!done && !finishing && out_fire && (out_idx + 1 == pairs[AW:0])) begin
            finishing <= 1'b1;
        end else if (finishing && !done) begin
            $writememh(results_file, results, 0, pairs - 1);
            done <= 1'b1;
        end
    end
endmodule
