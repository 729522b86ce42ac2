// Simulation-only host driver for the accelerator top (ttrain.rtl.top.Accelerator).
//
// Plays a command file into the top's host interface (store beats, instruction words, start),
// compares every word read back with the expected words in the same file, records the status
// and counters of every run, and dumps them to a file: no Python on the per-cycle path. cocotb
// only drives `clk` and awaits `finished` (the driver resets the DUT itself).
//
// The DUT module name comes from the `DUT` macro; its ports are the Amaranth ones
// (host_i__payload, ..., engine_error). Widths are parameters (set by ttrain.testbench.top).
//
// Commands: the host protocol of ttrain.platforms.protocol (the Vitis kernel's), with its
// simulation-driver commands (+ROM=<file>, $readmemh, 32-bit words, 4-word headers
// op store addr count; the generator is ttrain.testbench.top.TopSession.rom):
//   01 store addr count w0 .. w{count-1}   CMD_WRITE: write words from addr (beats of NB words)
//   82 store addr count e0 .. e{count-1}   CMD_CHECK: read count words from addr, compare
//   84 0 0 count i0 .. i{count-1}          CMD_IMEM: write instruction words 0 .. count-1
//   83 0 0 length error code pc max_cycles CMD_RUN_EXPECT: start a program of `length`
//                                          instructions, wait for the end, compare error/code
//                                          (and pc unless pc = ffffffff); record a run record
//   00 0 0 0                               CMD_END: dump results, raise `finished`
// Results (+RESULTS=<file>, $writememh, RES_DEPTH words): run record r (words 16r .. 16r+15)
//   in the protocol's RECORD_FIELDS order = tag ("RUN" + r), error, error_code, error_pc,
//   cycles, executed, busy_engine, busy_vector, busy_update, engine_cycles, engine_error,
//   index, status_ok, timed_out, 0, 0;
// the last 64 words hold the first 16 mismatches as (rom index, store << 28 | addr, got, want).
//
// Debug (plusargs, no rebuild):
//   +TRACE=<file>  one line per event of the top's trace port, in the cycles of the run
//                  (the sequencer's `cycles` counter):
//                    D <run> <cycle> <pc> <opcode> <unit>   an instruction dispatched (unit 0
//                                                           engine, 1 vector, 2 update, 3 seq)
//                    C <run> <cycle> <mask>                 completions (bit u: unit u done)
//                  ttrain.platforms.sim.top.parse_trace pairs them into instruction records.
//   +CORRUPT_PC=<pc> +CORRUPT_STORE=<id> +CORRUPT_ADDR=<addr>  plant a divergence: after
//                  every run that dispatched instruction <pc> to a unit, read word <addr> of store <id>
//                  through the host port and write it back with bit 0 flipped (the core RTL is
//                  untouched; tests of the divergence finder use it).
`ifndef DUT
`define DUT ttrain_top
`endif

module top_driver_tb #(
    parameter integer NB = 8,          // words per host beat (= banks)
    parameter integer SB = 2,          // store id bits
    parameter integer AB = 16,         // word address bits
    parameter integer IA = 12,         // instruction memory word address bits
    parameter integer LW = 9,          // program length bits
    parameter integer ROM_DEPTH = 1048576,
    parameter integer RES_DEPTH = 1024,
    // the protocol's codes (ttrain.platforms.protocol; build_top passes them)
    parameter [31:0] CMD_WRITE = 32'h01,
    parameter [31:0] CMD_CHECK = 32'h82,
    parameter [31:0] CMD_RUN_EXPECT = 32'h83,
    parameter [31:0] CMD_IMEM = 32'h84,
    parameter [31:0] RUN_TAG = 32'h52554E00
) (
    input  wire        clk,
    output reg         finished,
    output reg  [31:0] mismatches,
    output reg  [31:0] bad_runs,
    output reg  [31:0] runs
);
    localparam integer HW = 1 + SB + AB + NB + 32 * NB;
    localparam integer MM_BASE = RES_DEPTH - 64;
    localparam [3:0] S_RESET = 0, S_FETCH = 1, S_WRITE = 2, S_CHECK = 3, S_IMEM = 4,
                     S_START = 5, S_WAIT = 6, S_END = 7, S_HALT = 8, S_CRD = 9, S_CRW = 10,
                     S_CWR = 11;

    reg [31:0] rom [0:ROM_DEPTH-1];
    reg [31:0] res [0:RES_DEPTH-1];
    reg [8*1024-1:0] rom_file;
    reg [8*1024-1:0] res_file;
    reg [8*1024-1:0] trace_file;
    integer i;
    integer tfd = 0;                   // trace file (0: no trace)
    integer corrupt_pc = -1;           // planted divergence (-1: none)
    integer corrupt_store = 0;
    integer corrupt_addr = 0;
    reg corrupt_armed = 0;

    initial begin
        if (!$value$plusargs("ROM=%s", rom_file)) $fatal(1, "missing +ROM=");
        if (!$value$plusargs("RESULTS=%s", res_file)) $fatal(1, "missing +RESULTS=");
        if ($value$plusargs("TRACE=%s", trace_file)) begin
            tfd = $fopen(trace_file, "w");
            if (tfd == 0) $fatal(1, "cannot write +TRACE= file");
        end
        if (!$value$plusargs("CORRUPT_PC=%d", corrupt_pc)) corrupt_pc = -1;
        if (!$value$plusargs("CORRUPT_STORE=%d", corrupt_store)) corrupt_store = 0;
        if (!$value$plusargs("CORRUPT_ADDR=%d", corrupt_addr)) corrupt_addr = 0;
        for (i = 0; i < RES_DEPTH; i = i + 1) res[i] = 32'd0;
        $readmemh(rom_file, rom);
    end

    // ---- DUT ---------------------------------------------------------------------------
    reg               rst;
    reg               hv;
    reg  [HW-1:0]     hp;
    wire              hr;
    wire [32*NB-1:0]  op;
    wire              ov;
    reg               imem_we;
    reg  [IA-1:0]     imem_addr;
    reg  [31:0]       imem_data;
    reg  [LW-1:0]     length;
    reg               start;
    wire              busy, done, error, engine_error;
    wire [3:0]        error_code;
    wire [31:0]       error_pc, cycles, executed, busy_engine, busy_vector, busy_update;
    wire [31:0]       engine_cycles;
    wire              trace_valid;
    wire [31:0]       trace_pc;
    wire [7:0]        trace_op;
    wire [1:0]        trace_unit;
    wire [2:0]        trace_done;

    `DUT dut (
        .clk(clk), .rst(rst),
        .host_i__payload(hp), .host_i__valid(hv), .host_i__ready(hr),
        .host_o__payload(op), .host_o__valid(ov), .host_o__ready(1'b1),
        .imem_we(imem_we), .imem_addr(imem_addr), .imem_data(imem_data),
        .length(length), .start(start),
        .busy(busy), .done(done), .error(error), .error_code(error_code),
        .error_pc(error_pc), .cycles(cycles), .executed(executed),
        .busy_engine(busy_engine), .busy_vector(busy_vector), .busy_update(busy_update),
        .engine_cycles(engine_cycles), .engine_error(engine_error),
        .trace_valid(trace_valid), .trace_pc(trace_pc), .trace_op(trace_op),
        .trace_unit(trace_unit), .trace_done(trace_done)
    );

    // ---- instruction trace (+TRACE=) and the planted divergence (+CORRUPT_PC=) ------------
    always @(posedge clk) begin
        if (tfd != 0 && busy && trace_valid)
            $fwrite(tfd, "D %0d %0d %0d %0d %0d\n", runs, cycles, trace_pc, trace_op,
                    trace_unit);
        if (tfd != 0 && busy && trace_done != 3'd0)
            $fwrite(tfd, "C %0d %0d %0d\n", runs, cycles, trace_done);
    end

    // ---- command player -------------------------------------------------------------------
    reg [3:0]  state = S_RESET;
    reg [7:0]  rst_count = 0;
    integer    ip;            // next command word
    integer    cnt;           // words left to send (write/check requests, imem)
    integer    addr;          // next beat address
    integer    store;
    integer    rp;            // next expected word (check)
    integer    rcnt;          // expected words left (check)
    integer    base0;         // first address and word count of the current command
    integer    total;
    integer    waited;
    integer    max_cycles;
    reg [31:0] want_error, want_code, want_pc;
    integer    n, w;
    reg [32*NB-1:0] data;
    reg [NB-1:0]    mask;
    reg [31:0]      got;

    always @(posedge clk) begin
        if (busy && trace_valid && trace_unit != 2'd3 && corrupt_pc >= 0
                && trace_pc == corrupt_pc)
            corrupt_armed <= 1;           // a unit's instruction (not the sequencer's END)
        case (state)
        S_RESET: begin
            rst <= 1; hv <= 0; imem_we <= 0; start <= 0; length <= 0;
            finished <= 0; mismatches <= 0; bad_runs <= 0; runs <= 0;
            rst_count <= rst_count + 1;
            if (rst_count == 8) begin rst <= 0; ip <= 0; state <= S_FETCH; end
        end
        S_FETCH: begin
            case (rom[ip])
            CMD_WRITE, CMD_CHECK: begin
                store <= rom[ip + 1]; addr <= rom[ip + 2]; cnt <= rom[ip + 3];
                rcnt <= rom[ip + 3]; rp <= ip + 4; base0 <= rom[ip + 2]; total <= rom[ip + 3];
                if (rom[ip] == CMD_WRITE) begin ip <= ip + 4; state <= S_WRITE; end
                else begin ip <= ip + 4 + rom[ip + 3]; state <= S_CHECK; end
            end
            CMD_IMEM: begin cnt <= rom[ip + 3]; ip <= ip + 4; imem_addr <= 0; state <= S_IMEM; end
            CMD_RUN_EXPECT: begin
                length <= rom[ip + 3][LW-1:0]; want_error <= rom[ip + 4];
                want_code <= rom[ip + 5]; want_pc <= rom[ip + 6]; max_cycles <= rom[ip + 7];
                ip <= ip + 8; state <= S_START;
            end
            default: state <= S_END;
            endcase
        end
        S_WRITE, S_CHECK: begin
            // request beats: a new one whenever none is pending or the pending one is taken
            if (!hv || hr) begin
                if (cnt == 0) hv <= 0;
                else begin
                    n = (cnt < NB) ? cnt : NB;
                    for (w = 0; w < NB; w = w + 1) begin
                        mask[w] = (w < n);
                        data[32 * w +: 32] = (state == S_WRITE && w < n) ? rom[ip + w] : 32'd0;
                    end
                    hp <= {data, mask, addr[AB-1:0], store[SB-1:0], state == S_WRITE};
                    hv <= 1;
                    addr <= addr + n; cnt <= cnt - n;
                    if (state == S_WRITE) ip <= ip + n;
                end
            end
            // check answers
            if (state == S_CHECK && ov && rcnt != 0) begin
                n = (rcnt < NB) ? rcnt : NB;
                for (w = 0; w < NB; w = w + 1) begin
                    if (w < n) begin
                        got = op[32 * w +: 32];
                        if (got !== rom[rp + w]) begin
                            if (mismatches < 16) begin
                                res[MM_BASE + 4 * mismatches + 0] <= rp + w;
                                res[MM_BASE + 4 * mismatches + 1] <=
                                    (store << 28) | (base0 + total - rcnt + w);
                                res[MM_BASE + 4 * mismatches + 2] <= got;
                                res[MM_BASE + 4 * mismatches + 3] <= rom[rp + w];
                            end
                            mismatches <= mismatches + 1;
                        end
                    end
                end
                rp <= rp + n; rcnt <= rcnt - n;
            end
            if ((state == S_WRITE && cnt == 0 && (!hv || hr))
                    || (state == S_CHECK && cnt == 0 && (!hv || hr) && rcnt == 0)) begin
                hv <= 0;
                state <= S_FETCH;
            end
        end
        S_IMEM: begin
            if (cnt == 0) begin imem_we <= 0; state <= S_FETCH; end
            else begin
                imem_we <= 1; imem_data <= rom[ip];
                if (imem_we) imem_addr <= imem_addr + 1;
                ip <= ip + 1; cnt <= cnt - 1;
            end
        end
        S_START: begin
            start <= 1; waited <= 0; state <= S_WAIT;
        end
        S_WAIT: begin
            start <= 0;
            waited <= waited + 1;
            if (waited >= 2 && !busy) begin
                res[16 * runs + 0] <= RUN_TAG | (runs & 32'hff);
                res[16 * runs + 1] <= {31'd0, error};
                res[16 * runs + 2] <= {28'd0, error_code};
                res[16 * runs + 3] <= error_pc;
                res[16 * runs + 4] <= cycles;
                res[16 * runs + 5] <= executed;
                res[16 * runs + 6] <= busy_engine;
                res[16 * runs + 7] <= busy_vector;
                res[16 * runs + 8] <= busy_update;
                res[16 * runs + 9] <= engine_cycles;
                res[16 * runs + 10] <= {31'd0, engine_error};
                res[16 * runs + 11] <= runs;
                if ({31'd0, error} == want_error && {28'd0, error_code} == want_code
                        && (want_pc == 32'hffffffff || error_pc == want_pc) && !engine_error)
                    res[16 * runs + 12] <= 1;
                else
                    bad_runs <= bad_runs + 1;
                runs <= runs + 1;
                state <= corrupt_armed ? S_CRD : S_FETCH;
            end else if (waited > max_cycles) begin
                res[16 * runs + 0] <= RUN_TAG | (runs & 32'hff);
                res[16 * runs + 11] <= runs;
                res[16 * runs + 13] <= 1;
                bad_runs <= bad_runs + 1;
                runs <= runs + 1;
                state <= S_END;
            end
        end
        // planted divergence: read the word, write it back with bit 0 flipped
        S_CRD: begin
            hp <= {{(32 * NB){1'b0}}, {{(NB - 1){1'b0}}, 1'b1}, corrupt_addr[AB-1:0],
                   corrupt_store[SB-1:0], 1'b0};
            hv <= 1;
            state <= S_CRW;
        end
        S_CRW: begin
            if (hr) hv <= 0;
            if (ov) begin
                hp <= {{(32 * (NB - 1)){1'b0}}, op[31:0] ^ 32'd1, {{(NB - 1){1'b0}}, 1'b1},
                       corrupt_addr[AB-1:0], corrupt_store[SB-1:0], 1'b1};
                hv <= 1;
                state <= S_CWR;
            end
        end
        S_CWR: begin
            if (hr) begin
                hv <= 0; corrupt_armed <= 0; state <= S_FETCH;
            end
        end
        S_END: begin
            if (tfd != 0) $fclose(tfd);
            $writememh(res_file, res);
            finished <= 1;
            state <= S_HALT;
        end
        default: ;
        endcase
    end
endmodule
