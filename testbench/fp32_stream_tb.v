// Simulation-only streaming wrapper for the FP32 units (and any unit with the same ports).
//
// Plays a file of operand pairs into the DUT at one pair per cycle (optionally with idle
// cycles), collects every result into a memory and dumps it to a file, so that no Python runs
// on the per-cycle path: cocotb only resets, pulses `start` and awaits `done`.
//
// The DUT module name comes from the `DUT` macro (-DDUT=fp32_mul); its ports are Amaranth's
// (clk, rst, i__payload, i__valid, o__payload, o__valid; the constant i__ready is not a port).
//
// Plusargs:
//   +OPERANDS=<file>  $readmemh file, one IN_W-bit word per line ({b, a}: a in bits 31:0)
//   +RESULTS=<file>   $writememh file written when all results are in, one OUT_W-bit word each
//   +PAIRS=<n>        number of pairs (1 .. DEPTH)
//   +LATENCY=<n>      expected DUT latency; every cycle checks o__valid against the delayed
//                     i__valid and counts disagreements in `valid_errors`
//   +GAPS=<n>         insert pseudo-random idle cycles (about 1 in 4) before each of the
//                     first n beats (default 0: no idle cycles)
`ifndef DUT
`define DUT fp32_mul
`endif

module fp32_stream_tb #(
    parameter integer IN_W = 64,
    parameter integer OUT_W = 32,
    parameter integer DEPTH = 1048576,
    parameter integer MAX_LATENCY = 32
) (
    input  wire        clk,
    input  wire        rst,
    input  wire        start,
    output reg         done,
    output reg  [31:0] valid_errors,
    output reg  [31:0] results_seen,
    output reg  [31:0] cycles
);
    localparam integer AW = $clog2(DEPTH);

    reg [IN_W-1:0]  operands [0:DEPTH-1];
    reg [OUT_W-1:0] results  [0:DEPTH-1];

    reg [8*1024-1:0] operands_file;
    reg [8*1024-1:0] results_file;
    integer pairs;
    integer latency;
    integer gaps;

    initial begin
        if (!$value$plusargs("OPERANDS=%s", operands_file)) $fatal(1, "missing +OPERANDS=");
        if (!$value$plusargs("RESULTS=%s", results_file)) $fatal(1, "missing +RESULTS=");
        if (!$value$plusargs("PAIRS=%d", pairs)) $fatal(1, "missing +PAIRS=");
        if (!$value$plusargs("LATENCY=%d", latency)) $fatal(1, "missing +LATENCY=");
        if (!$value$plusargs("GAPS=%d", gaps)) gaps = 0;
        if (gaps < 0 || gaps > DEPTH) $fatal(1, "+GAPS=%0d outside 0..%0d", gaps, DEPTH);
        if (pairs < 1 || pairs > DEPTH) $fatal(1, "+PAIRS=%0d outside 1..%0d", pairs, DEPTH);
        if (latency < 0 || latency > MAX_LATENCY) $fatal(1, "+LATENCY=%0d outside 0..%0d",
                                                         latency, MAX_LATENCY);
        $readmemh(operands_file, operands, 0, pairs - 1);
    end

    // Feeder: one pair per cycle from `start`; idle when the LFSR says so during the first
    // +GAPS beats.
    reg         running;
    reg         finishing;
    reg  [AW:0] in_idx;
    reg  [15:0] lfsr;
    wire        idle = (in_idx < gaps[AW:0]) && (lfsr[1:0] == 2'b00);
    wire        in_valid = running && !idle && (in_idx < pairs[AW:0]);
    wire [IN_W-1:0] in_payload = in_valid ? operands[in_idx[AW-1:0]] : {IN_W{1'b1}};

    wire [OUT_W-1:0] out_payload;
    wire             out_valid;

    `DUT dut (
        .clk(clk),
        .rst(rst),
        .i__payload(in_payload),
        .i__valid(in_valid),
        .o__payload(out_payload),
        .o__valid(out_valid)
    );

    // Expected o__valid: i__valid delayed by `latency` cycles (bit k = k cycles ago, k >= 1).
    reg  [MAX_LATENCY-1:0] valid_history;
    wire [MAX_LATENCY:0] valid_now = {valid_history[MAX_LATENCY-1:0], in_valid};
    reg  [AW:0] out_idx;

    always @(posedge clk) begin
        if (rst) begin
            running <= 1'b0;
            in_idx <= 0;
            out_idx <= 0;
            lfsr <= 16'hACE1;
            valid_history <= 0;
            valid_errors <= 0;
            results_seen <= 0;
            cycles <= 0;
        end else if (!done && !finishing) begin
            if (start) running <= 1'b1;
            if (running) cycles <= cycles + 1;
            lfsr <= {lfsr[14:0], lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]};
            if (in_valid) in_idx <= in_idx + 1;
            valid_history <= valid_now[MAX_LATENCY-1:0];
            if (out_valid != valid_now[latency]) valid_errors <= valid_errors + 1;
            if (out_valid) begin
                results[out_idx[AW-1:0]] <= out_payload;
                out_idx <= out_idx + 1;
                results_seen <= results_seen + 1;
            end
        end
    end

    // Last result written at this edge: dump the memory at the next edge, then raise `done`
    // (so the file is complete by the time cocotb sees `done`).
    always @(posedge clk) begin
        if (rst) begin
            finishing <= 1'b0;
            done <= 1'b0;
        end else if (!done && !finishing && out_valid && (out_idx + 1 == pairs[AW:0])) begin
            finishing <= 1'b1;
        end else if (finishing && !done) begin
            $writememh(results_file, results, 0, pairs - 1);
            done <= 1'b1;
        end
    end
endmodule
